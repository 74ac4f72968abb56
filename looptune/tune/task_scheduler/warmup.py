"""The warm-up round of a tuning run: how many trials each task's first batch gets when one
budget is shared by many tasks, the batch size after it, and the line that says so up front.

With a budget of B trials left for T tasks, the warm-up spends about `warmup_share` of B
(never more than a full batch per task): every task first gets `min_first` trials, the rest
goes by each task's share of the model's time (weight x its default schedule's time, or an
estimate from FLOPs and bytes) up to a batch of `num_trials_per_iter`. Later batches hold
min(num_trials_per_iter, max(min_first, B // T)) trials, so the task scheduler decides often
enough to matter. A budget under T x min_first covers the tasks with the largest shares."""
from __future__ import annotations

from dataclasses import dataclass

# flops per byte at which a kernel turns from memory-bound to compute-bound: enough to rank
# tasks without a measurement (a transpose is not free because it has no flops)
MACHINE_BALANCE = 8.0


def estimated_cost(flops: float | None, nbytes: int) -> float:
    """A task's relative time per call without measuring it: a roofline's max(flops, bytes)."""
    return max(float(flops or 0.0), MACHINE_BALANCE * nbytes, 1.0)


@dataclass(frozen=True)
class WarmupPlan:
    first: tuple          # trials of each task's first batch of this run (0: no warm-up batch)
    order: tuple          # the tasks of the warm-up, largest share first
    batch: int            # trials per batch after a task's first one
    budget: int           # trials left for this run
    cold: int             # tasks without a trial yet (and not done)
    min_first: int        # the smallest first batch that counts as covering a task
    per_iter: int         # a full batch

    @property
    def covered(self) -> bool:
        return len(self.order) == self.cold

    def summary(self, spent: int = 0) -> str:
        """One line: what the warm-up gives, what follows, what a full warm-up would cost."""
        sizes = [self.first[i] for i in self.order]
        if not sizes:
            return f"{self.budget} trials left; every task has had a batch: batches of {self.batch}"
        lo, hi = min(sizes), max(sizes)
        each = f"{lo}" if lo == hi else f"{lo}-{hi}"
        line = (f"warm-up: {len(sizes)} of {self.cold} untried tasks get a first batch of {each} "
                f"trials ({sum(sizes)} of the {self.budget} left, largest share of the time "
                "first)")
        if sum(sizes) < self.budget:
            line += (f", then batches of {self.batch} go where the task scheduler expects the "
                     "most gain")
        full = self.cold * self.per_iter
        if hi < self.per_iter and self.budget < full:
            line += f"; a full first batch of {self.per_iter} for every task needs {spent + full}"
        return line

    def shortfall(self, names, spent: int = 0) -> str | None:
        """The warning for a budget that cannot give every task its first `min_first` trials:
        which tasks it covers, and the budget that would cover them all; None if it can."""
        if self.covered:
            return None
        left = self.cold - len(self.order)
        shown = ", ".join(names[i] for i in self.order[:8]) + (", ..." if len(self.order) > 8
                                                               else "")
        return (f"a budget of {self.budget} trials cannot cover the {self.cold} tasks (at least "
                f"{self.min_first} trials each): it tunes the {len(self.order)} with the largest "
                f"share of the model's time ({shown}) and leaves {left} on their default "
                f"schedules; max_trials_global={spent + self.cold * self.min_first} (--trials) "
                "covers every task")


def plan_warmup(shares, caps, *, budget: int, per_iter: int, min_first: int = 4,
                warmup_share: float = 0.5) -> WarmupPlan:
    """The warm-up for tasks with `shares` (relative time, any unit) and `caps` (the trials
    each may still take in its first batch; 0: no warm-up batch - done, or tried before)."""
    n = len(shares)
    floor = max(1, min(min_first, per_iter))
    live = sum(c > 0 for c in caps) or n or 1
    batch = max(1, min(per_iter, max(floor, budget // live)))
    cold = [i for i in range(n) if caps[i] > 0]
    order = sorted(cold, key=lambda i: (-shares[i], i))
    first = [0] * n
    if budget <= 0 or not cold:
        return WarmupPlan(tuple(first), (), batch, max(0, budget), len(cold), floor, per_iter)
    room = {i: min(per_iter, caps[i]) for i in cold}
    if len(cold) == 1:  # nothing to share: the first batch is an ordinary one
        i = cold[0]
        first[i] = min(room[i], budget)
        return WarmupPlan(tuple(first), (i,), batch, budget, 1, floor, per_iter)
    k = min(len(cold), max(1, budget // floor))
    covered = order[:k]
    if k < len(cold):
        pool = budget
    else:
        pool = min(sum(room[i] for i in covered), max(int(budget * warmup_share), k * floor),
                   budget)
    for i in covered:
        first[i] = min(floor, room[i], pool)
        pool -= first[i]
    _fill_by_share(first, covered, room, shares, pool)
    return WarmupPlan(tuple(first), tuple(covered), batch, budget, len(cold), floor, per_iter)


def _fill_by_share(first: list, tasks: list, room: dict, shares, pool: int) -> None:
    """Give `pool` more trials to `tasks` in proportion to their shares, each up to its room."""
    while pool > 0:
        open_ = [i for i in tasks if first[i] < room[i]]
        if not open_:
            return
        total = sum(max(0.0, shares[i]) for i in open_)
        given = 0
        for i in open_:
            part = max(0.0, shares[i]) / total if total > 0 else 1 / len(open_)
            add = min(int(pool * part), room[i] - first[i], pool - given)
            first[i] += add
            given += add
        if given == 0:  # shares too small to round up: one trial to the largest
            first[open_[0]] += 1
            given = 1
        pool -= given
