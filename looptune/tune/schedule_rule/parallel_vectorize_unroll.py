"""ParallelizeVectorizeUnroll: on the root block, sample how much to parallelize (jobs per
core) and how far to unroll, and record how much to vectorize; the postprocessor applies them
once the loop structure is final. Both samples are decisions the mutators change."""
from __future__ import annotations

from .base import ScheduleRule

PARALLEL = "meta_schedule.parallel"
VECTORIZE = "meta_schedule.vectorize"


@ScheduleRule.registry.register("parallel-vectorize-unroll")
class ParallelizeVectorizeUnroll(ScheduleRule):
    """Acts on the root block only: annotates it with a sampled parallel extent and the
    vectorize limit (applied by RewriteParallelVectorizeUnroll) and a sampled unroll depth
    (applied by lowering)."""

    def __init__(self, jobs_per_core=(1, 4, 16, 64), max_vectorize_extent: int = 64,
                 unroll_max_steps=(0, 16, 64, 512), unroll_explicit: bool = True):
        """jobs_per_core: the choices for the parallel extent, in jobs per core (one int
        fixes it; () or 0 turns parallelization off)."""
        if isinstance(jobs_per_core, int):
            jobs_per_core = (jobs_per_core,) if jobs_per_core > 0 else ()
        self.jobs_per_core = tuple(jobs_per_core)
        self.max_vectorize_extent = max_vectorize_extent
        self.unroll_max_steps = tuple(unroll_max_steps)
        self.unroll_explicit = unroll_explicit
        self.cores = 1

    def initialize_with_tune_context(self, context) -> None:
        self.cores = context.target.cores

    def apply(self, sch, block) -> list:
        if sch.get(block).name != "root":
            return [sch]
        if self.jobs_per_core:
            n = len(self.jobs_per_core)
            jobs = sch.sample_categorical([j * self.cores for j in self.jobs_per_core],
                                          [1.0 / n] * n)
            sch.annotate(block, PARALLEL, jobs)
        if self.max_vectorize_extent > 0:
            sch.annotate(block, VECTORIZE, self.max_vectorize_extent)
        if self.unroll_max_steps:
            n = len(self.unroll_max_steps)
            step = sch.sample_categorical(self.unroll_max_steps, [1.0 / n] * n)
            sch.annotate(block, "pragma_auto_unroll_max_step", step)
            sch.annotate(block, "pragma_unroll_explicit", int(self.unroll_explicit))
        return [sch]
