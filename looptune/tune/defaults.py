"""Default rules and postprocessors per target kind, as data."""
from __future__ import annotations

DEFAULT_RULES = {
    "cpu": [
        ("auto-inline", {"into_consumer": True, "into_producer": False,
                         "disallow_if_then_else": True}),
        ("add-rfactor", {"max_jobs_per_core": 16, "max_innermost_factor": 64}),
        # max_innermost_factor None: four vector registers' worth of float32 lanes
        ("multi-level-tiling", {"structure": "SSRSRS", "max_innermost_factor": None,
                                "write_levels": (1, 2), "write_scope": "local",
                                "tile_sampler": "partitioned"}),
        ("parallel-vectorize-unroll", {"jobs_per_core": (1, 4, 16, 64),
                                       "max_vectorize_extent": 64,
                                       "unroll_max_steps": (0, 16, 64, 512),
                                       "unroll_explicit": True}),
        ("random-compute-location", {}),
    ],
}

DEFAULT_POSTPROCS = {
    "cpu": [
        ("rewrite-parallel-vectorize-unroll", {}),
        ("verify-cpu", {"max_vector_lanes": 64, "max_local_bytes": 1 << 20}),
    ],
}


def _make(registry_base, entries):
    return [registry_base.create(name, **dict(opts)) for name, opts in entries]


def default_rules(target) -> list:
    from .schedule_rule.base import ScheduleRule
    return _make(ScheduleRule, DEFAULT_RULES[_kind(target)])


def default_postprocs(target) -> list:
    from .postproc.base import Postproc
    return _make(Postproc, DEFAULT_POSTPROCS[_kind(target)])


def _kind(target) -> str:
    kind = target.kind
    if kind not in DEFAULT_RULES:
        raise ValueError(f"no default schedule rules for target kind {kind!r} yet; pass "
                         f"sch_rules= and postprocs= explicitly (have: {', '.join(DEFAULT_RULES)})")
    return kind
