"""ReplayTrace: sample the design space at random - replay a design-space trace with fresh
decisions, postprocess, skip schedules already measured."""
from __future__ import annotations

import random
import warnings

from ...schedule import Schedule, ScheduleError, Trace
from ...tir.structural import structural_hash
from .base import MeasureCandidate, SearchStrategy


def finish(sch, postprocs) -> bool:
    """Run the postprocessors on a sampled schedule; False if one rejects it."""
    sch.enter_postproc()
    for p in postprocs:
        try:
            if not p.apply(sch):
                return False
        except ScheduleError:
            return False
    return True


def sample_from(space: Schedule, func, seed: int, postprocs) -> MeasureCandidate | None:
    """A fresh sample of a design space: its trace replayed with new decisions."""
    sch = Schedule(func, seed=seed)
    try:
        Trace(space.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
    except ScheduleError:
        return None
    if not finish(sch, postprocs):
        return None
    return MeasureCandidate(sch, structural_hash(sch.func))


@SearchStrategy.registry.register("replay-trace")
class ReplayTrace(SearchStrategy):
    """Random search: every candidate is a design space sampled afresh; the baseline the
    evolutionary search must beat. A batch gives up after `max_fail_count` samples that were
    refused or measured already."""

    def __init__(self, max_fail_count: int = 100):
        self.max_fail_count = max_fail_count

    def pre_tuning(self, *, max_trials, num_trials_per_iter, design_spaces, database, seen):
        self.max_trials = max_trials
        self.per_iter = num_trials_per_iter
        self.spaces = design_spaces
        self.seen = set(seen)
        self.trials = 0
        self.rand = random.Random(self.context.seed)

    def generate_measure_candidates(self, n: int | None = None):
        n = min(n or self.per_iter, self.max_trials - self.trials)
        if n <= 0 or not self.spaces:
            return None
        out, fails = [], 0
        while len(out) < n and fails < self.max_fail_count:
            space = self.rand.choice(self.spaces)
            cand = sample_from(space, self.context.func, self.rand.randrange(1 << 31),
                               self.context.postprocs)
            if cand is None or cand.sch_hash in self.seen:
                fails += 1
                continue
            self.seen.add(cand.sch_hash)
            out.append(cand)
        self.trials += len(out)
        if not out and not self.trials:
            warnings.warn(f"{self.context.task_name}: the design space gave no valid candidate in "
                          f"{fails} samples (every replay or postprocessor refused it, or each "
                          "was measured already); check the schedule rules and postprocessors "
                          "for this workload", stacklevel=2)
        return out or None
