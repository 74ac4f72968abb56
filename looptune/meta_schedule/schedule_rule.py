"""Schedule rules under MetaSchedule's constructor keywords; each returns the engine's rule
(tune/schedule_rule). What a keyword becomes is said beside it."""
from __future__ import annotations

from ..tune import schedule_rule as engine
from ..tune.schedule_rule import (AddRFactor, AutoBind, CrossThreadReduction,  # noqa: F401
                                  RandomComputeLocation, ScheduleRule)

__all__ = ["AddRFactor", "AutoBind", "AutoInline", "CrossThreadReduction", "MultiLevelTiling",
           "ParallelizeVectorizeUnroll", "RandomComputeLocation", "ReuseType", "ScheduleRule"]


def ReuseType(req: str = "may", levels=(1, 2), scope: str = "local") -> dict:  # noqa: N802
    """MetaSchedule's cache-reuse description: `req` "no", "may" or "must"."""
    return {"req": req, "levels": tuple(levels), "scope": scope}


def AutoInline(into_producer: bool = False, into_consumer: bool = True,  # noqa: N802
               inline_const_tensor: bool = True, disallow_if_then_else: bool = True,
               require_injective: bool = True, require_ordered: bool = True,
               disallow_op=None) -> engine.AutoInline:
    """The other MetaSchedule keywords are how looptune's rule always behaves."""
    return engine.AutoInline(into_consumer=into_consumer, into_producer=into_producer,
                             disallow_if_then_else=disallow_if_then_else)


def MultiLevelTiling(structure: str = "SSRSRS", tile_binds=None,  # noqa: N802
                     max_innermost_factor: int | None = None, vector_load_lens=None,
                     reuse_read=None, reuse_write=None) -> engine.MultiLevelTiling:
    """reuse_write=ReuseType(req, levels, scope): the accumulator cache ("may": an
    elementwise consumer is fused at the write level instead); None: the engine's default
    (may, levels (1, 2), local). reuse_read=ReuseType(levels=..., scope="shared"): cached
    reads (GPU); None: none."""
    kwargs = {}
    if reuse_write is not None:
        if reuse_write["req"] == "no":
            kwargs.update(write_levels=())
        else:
            kwargs.update(write_reuse=reuse_write["req"], write_levels=reuse_write["levels"],
                          write_scope=reuse_write["scope"])
    if reuse_read is not None and reuse_read["req"] != "no":
        kwargs.update(read_levels=reuse_read["levels"], read_scope=reuse_read["scope"])
    return engine.MultiLevelTiling(structure, max_innermost_factor,
                                   tile_binds=tuple(tile_binds or ()),
                                   vector_load_lens=tuple(vector_load_lens or ()), **kwargs)


def ParallelizeVectorizeUnroll(max_jobs_per_core: int = 16,  # noqa: N802
                               max_vectorize_extent: int = 64,
                               unroll_max_steps=(0, 16, 64, 512),
                               unroll_explicit: bool = True) -> engine.ParallelizeVectorizeUnroll:
    """max_jobs_per_core: the parallel extent, in jobs per core (-1: no parallel loop)."""
    jobs = () if max_jobs_per_core is None or max_jobs_per_core <= 0 else max_jobs_per_core
    return engine.ParallelizeVectorizeUnroll(jobs, max_vectorize_extent,
                                             tuple(unroll_max_steps), unroll_explicit)
