"""The warm-up round of a tuning run: how many trials each task's first batch gets when one
budget is shared by many tasks, the batch size after it, and the line that says so up front.

With a budget of B trials left for T untried tasks, every task first gets
floor = min(min_first, B // T) trials (at least 1), then about `warmup_share` of B in all
(never more than a full batch of `num_trials_per_iter` per task) goes by each task's share of
the model's time: weight x its default schedule's measured time, or an estimate from FLOPs and
bytes. Later batches hold min(num_trials_per_iter, max(floor, B // T)) trials, so the task
scheduler decides often enough to matter. A budget under T x min_first is said up front
(`shortfall`): under T, only the B tasks with the largest shares get a trial."""
from __future__ import annotations

from dataclasses import dataclass

# flops per byte at which a kernel turns from memory-bound to compute-bound: enough to rank
# tasks without a measurement (a transpose is not free because it has no flops)
MACHINE_BALANCE = 8.0
# what one trial costs (sampling, compiling, timing), to plan a warm-up under a time budget:
# 0.7-1.0 s measured on one Zen 4 / Zen 5 core with gcc, most of it compiling
SECONDS_PER_TRIAL = 0.8


def estimated_cost(flops: float | None, nbytes: int) -> float:
    """A task's relative time per call without measuring it: a roofline's max(flops, bytes)."""
    return max(float(flops or 0.0), MACHINE_BALANCE * nbytes, 1.0)


@dataclass(frozen=True)
class WarmupPlan:
    """The warm-up of one run, computed once by plan_warmup: each task's first batch, the order
    they come in, and the batch size after."""

    first: tuple          # trials of each task's first batch of this run (0: no warm-up batch)
    order: tuple          # the tasks of the warm-up, largest share first
    batch: int            # trials per batch after a task's first one
    budget: int           # trials left for this run
    cold: int             # tasks without a trial yet (and not done)
    floor: int            # the smallest first batch given
    min_first: int        # the first batch a task should get at least
    per_iter: int         # a full batch

    @property
    def covered(self) -> bool:
        """Every untried task gets a first batch."""
        return len(self.order) == self.cold

    def summary(self, spent: int = 0) -> str:
        """One line: what the warm-up gives, what follows, what a full warm-up would cost."""
        sizes = [self.first[i] for i in self.order]
        if not sizes:
            return f"{self.budget} trials left; every task has had a batch: batches of {self.batch}"
        lo, hi = min(sizes), max(sizes)
        each = f"{lo}" if lo == hi else f"{lo}-{hi}"
        line = (f"warm-up: {len(sizes)} of {self.cold} untried tasks get a first batch of {each} "
                f"trial{'s' if hi > 1 else ''} ({sum(sizes)} of the {self.budget} left, largest share of the time "
                "first)")
        if sum(sizes) < self.budget:
            line += (f", then batches of {self.batch} go where the task scheduler expects the "
                     "most gain")
        full = self.cold * self.per_iter
        if hi < self.per_iter and self.budget < full:
            line += f"; a full first batch of {self.per_iter} for every task needs {spent + full}"
        return line

    def shortfall(self, names, spent: int = 0) -> str | None:
        """The warning for a budget that cannot give every task a first batch of `min_first`
        trials: what it covers, and the budget that would cover every task; None if it can."""
        if self.covered and (self.cold <= 1 or self.floor >= self.min_first):
            return None  # each gets min_first, or there is nothing to share
        need = (f"max_trials_global={spent + self.cold * self.min_first} (--trials) gives every "
                f"task {self.min_first}")
        if self.covered:
            sizes = [self.first[i] for i in self.order]
            few = f"{min(sizes)}" if min(sizes) == max(sizes) else f"{min(sizes)}-{max(sizes)}"
            return (f"a budget of {self.budget} trials gives each of the {self.cold} tasks only "
                    f"{few} trials in its first batch (largest share of the model's time "
                    f"first); {need}")
        shown = ", ".join(names[i] for i in self.order[:8]) + (", ..." if len(self.order) > 8
                                                               else "")
        return (f"a budget of {self.budget} trials cannot cover the {self.cold} tasks: it gives "
                f"the {len(self.order)} with the largest share of the model's time ({shown}) "
                f"one trial each and leaves {self.cold - len(self.order)} on their default "
                f"schedules; {need}")


def plan_warmup(shares, caps, *, budget: int, per_iter: int, min_first: int = 4,
                warmup_share: float = 0.5) -> WarmupPlan:
    """The warm-up for tasks with `shares` (relative time, any unit) and `caps` (the trials
    each may still take in its first batch; 0: no warm-up batch - done, or tried before)."""
    n = len(shares)
    cold = [i for i in range(n) if caps[i] > 0]
    order = sorted(cold, key=lambda i: (-shares[i], i))
    want = max(1, min(min_first, per_iter))
    floor = max(1, min(want, budget // max(1, len(cold))))
    live = len(cold) or n or 1
    batch = max(1, min(per_iter, max(floor, budget // live)))
    first = [0] * n

    def plan(covered):
        return WarmupPlan(tuple(first), tuple(covered), batch, max(0, budget), len(cold), floor,
                          want, per_iter)
    if budget <= 0 or not cold:
        return plan(())
    room = {i: min(per_iter, caps[i]) for i in cold}
    if len(cold) == 1:  # nothing to share: the first batch is an ordinary one
        i = cold[0]
        first[i] = min(room[i], budget)
        return plan((i,))
    covered = order[:min(len(cold), budget // floor)]
    if len(covered) < len(cold):
        pool = budget
    else:
        pool = min(sum(room[i] for i in covered), max(int(budget * warmup_share),
                                                       len(covered) * floor), budget)
    for i in covered:
        first[i] = min(floor, room[i], pool)
        pool -= first[i]
    _fill_by_share(first, covered, room, shares, pool)
    return plan(covered)


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
