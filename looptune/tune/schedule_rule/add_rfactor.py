"""AddRFactor: for a reduction with too little spatial parallelism (a row sum, a
matrix-vector product), also offer versions that rfactor the reduction so its outer part
can run in parallel."""
from __future__ import annotations

from math import prod

from ...schedule import ScheduleError
from .analysis import loop_kinds
from .base import ScheduleRule


@ScheduleRule.registry.register("add-rfactor")
class AddRFactor(ScheduleRule):
    """For a reduction whose spatial extent is below `max_jobs_per_core` x the target's cores:
    keeps it as it is and adds up to two rfactored spaces (the outer or the inner piece of its
    fused innermost reduction loops made spatial)."""

    def __init__(self, max_jobs_per_core: int = 16, max_innermost_factor: int = 64):
        self.max_jobs_per_core = max_jobs_per_core
        self.max_innermost_factor = max_innermost_factor
        self.cores = 1

    def initialize_with_tune_context(self, context) -> None:
        self.cores = context.target.cores

    def apply(self, sch, block) -> list:
        b = sch.get(block)
        if b.name == "root" or b.init is None:
            return [sch]
        spatial = prod(iv.extent for iv in b.iter_vars if iv.kind == "S")
        if spatial >= self.max_jobs_per_core * self.cores:
            return [sch]
        n_r = 0  # the innermost run of pure reduction loops
        for kind in reversed(loop_kinds(sch, block)):
            if kind != "R":
                break
            n_r += 1
        if n_r == 0:
            return [sch]
        out = [sch]
        for which in (0, 1):
            s = sch.copy()
            try:
                loops = s.get_loops(block)[-n_r:]
                fused = s.fuse(*loops) if len(loops) > 1 else loops[0]
                tiles = s.sample_perfect_tile(fused, n=2, max_innermost_factor=self.max_innermost_factor)
                pieces = s.split(fused, tiles)
                s.rfactor(pieces[which], 0)
            except ScheduleError:
                continue
            out.append(s)
        return out
