"""ParallelizeVectorizeUnroll: on the root block, record how much to parallelize and
vectorize (applied by the postprocessor once the loop structure is final) and sample how far
to unroll."""
from __future__ import annotations

from .base import ScheduleRule

PARALLEL = "meta_schedule.parallel"
VECTORIZE = "meta_schedule.vectorize"


@ScheduleRule.registry.register("parallel-vectorize-unroll")
class ParallelizeVectorizeUnroll(ScheduleRule):
    def __init__(self, max_jobs_per_core: int = 16, max_vectorize_extent: int = 64,
                 unroll_max_steps=(0, 16, 64, 512), unroll_explicit: bool = True):
        self.max_jobs_per_core = max_jobs_per_core
        self.max_vectorize_extent = max_vectorize_extent
        self.unroll_max_steps = tuple(unroll_max_steps)
        self.unroll_explicit = unroll_explicit
        self.cores = 1

    def initialize_with_tune_context(self, context) -> None:
        self.cores = context.target.cores

    def apply(self, sch, block) -> list:
        if sch.get(block).name != "root":
            return [sch]
        if self.max_jobs_per_core > 0:
            sch.annotate(block, PARALLEL, self.max_jobs_per_core * self.cores)
        if self.max_vectorize_extent > 0:
            sch.annotate(block, VECTORIZE, self.max_vectorize_extent)
        if self.unroll_max_steps:
            n = len(self.unroll_max_steps)
            step = sch.sample_categorical(self.unroll_max_steps, [1.0 / n] * n)
            sch.annotate(block, "pragma_auto_unroll_max_step", step)
            sch.annotate(block, "pragma_unroll_explicit", int(self.unroll_explicit))
        return [sch]
