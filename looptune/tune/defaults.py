"""Default rules and postprocessors per target kind, as data."""
from __future__ import annotations

from .error import TuneError

DEFAULT_RULES = {
    "cpu": [
        ("auto-inline", {"into_consumer": True, "into_producer": False,
                         "disallow_if_then_else": True}),
        ("add-rfactor", {"max_jobs_per_core": 16, "max_innermost_factor": 64}),
        # max_innermost_factor None: four vector registers' worth of float32 lanes
        # read_levels (None, 1): spaces without copies, and with inputs copied per R0 tile
        # into a packed panel (as BLAS packs B): on AVX2 (16 registers) the panel is what
        # keeps a 1024 matmul near OpenBLAS (measured 0.76x without, 0.93x with, 128 trials)
        # read_operands ("vector",): only the inputs loaded as vectors are copied (a
        # matmul's B, a conv's padded input); the broadcast ones are read where they lie. A
        # copy of A inside the column tiles was made again for each of them: as AVX2 on a
        # Zen 4, matmul 1024, 256 trials, two seeds, 0.91-0.93x numpy with B's copy alone
        # against 0.76-0.83x with both (AVX-512: 20.5-22.3 ms against 21.1-23.0 ms; the
        # tutorial conv2d: 0.95-0.97x torch against 0.98-1.00x, within its noise)
        # max_innermost_reduction 256: the reduction steps per load and store of the
        # register tile; with 32 (four AVX2 vectors, the spatial limit) the best AVX2 matmul
        # 1024 of a 256-trial search ran 5% slower than with its k tile at 128 instead; with
        # 256, as AVX2 on a Zen 4, three seeds (tune_options.py kc:128 kc:256): 0.940-0.949x
        # numpy against 0.839-0.936x (AVX-512: 1.039-1.075x against 1.057-1.065x;
        # relu(x@W+b) 1.65-1.74x against 1.63-1.69x): the register tile is loaded and stored
        # half as often (benchmarks/matmul_nests.py models the nests)
        # intrinsics: blocks a tensor intrinsic of the target computes (int8 and bf16 dot
        # products) are also tiled around it (the search compares the two)
        ("multi-level-tiling", {"structure": "SSRSRS", "max_innermost_factor": None,
                                "max_innermost_reduction": 256,
                                "write_levels": (1, 2), "write_scope": "local",
                                "read_levels": (None, 1), "read_operands": ("vector",),
                                "tile_sampler": "partitioned", "channel_vectors": True,
                                "intrinsics": {"structure": "SSRSRS",
                                               "max_innermost_factor": 8,
                                               "max_innermost_reduction": 64,
                                               "write_levels": (1, 2)}}),
        ("parallel-vectorize-unroll", {"jobs_per_core": (1, 4, 16, 64),
                                       "max_vectorize_extent": 64,
                                       "unroll_max_steps": (0, 16, 64, 512),
                                       "unroll_explicit": True}),
        ("random-compute-location", {}),
    ],
    # MetaSchedule's CUDA set: a thread block per S0 tile, virtual threads per S1, threads per
    # S2; inputs staged in shared memory per outer reduction step, accumulators in registers
    "cuda": [
        ("auto-inline", {"into_consumer": True, "into_producer": True,
                         "disallow_if_then_else": False}),
        ("cross-thread-reduction", {"thread_extents": (4, 8, 16, 32, 64, 128, 256, 512)}),
        # max_innermost_factor 16, not MetaSchedule's 64: about twice as many samples fit
        # the thread, register and shared-memory limits (verify-gpu-code refuses the rest)
        ("multi-level-tiling", {"structure": "SSSRRSRS", "max_innermost_factor": 16,
                                "tile_binds": ("blockIdx.x", "vthread.x", "threadIdx.x"),
                                "read_levels": (1,), "read_scope": "shared",
                                "vector_load_lens": (1, 2, 4),
                                "write_levels": (3,), "write_scope": "local",
                                "write_reuse": "must", "tile_sampler": "perfect"}),
        ("auto-bind", {"thread_extents": (32, 64, 128, 256, 512, 1024), "max_blocks": 256}),
        ("parallel-vectorize-unroll", {"jobs_per_core": (), "max_vectorize_extent": 0,
                                       "unroll_max_steps": (0, 16, 64, 512, 1024),
                                       "unroll_explicit": True}),
    ],
}

DEFAULT_POSTPROCS = {
    "cpu": [
        ("rewrite-layout", {}),  # a model's constant weights only
        ("rewrite-parallel-vectorize-unroll", {}),
        ("verify-cpu", {"max_vector_lanes": 64, "max_local_bytes": 1 << 20}),
    ],
    "cuda": [
        ("rewrite-cooperative-fetch", {}),
        ("rewrite-unbound-block", {"max_threads": None, "max_blocks": 256}),
        ("rewrite-parallel-vectorize-unroll", {}),
        ("verify-gpu-code", {"max_vthreads": 8, "max_vector_bytes": 16, "register_reserve": 16}),
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
        raise TuneError(f"no default schedule rules for target kind {kind!r} yet; pass "
                        f"sch_rules= and postprocs= explicitly (have: {', '.join(DEFAULT_RULES)})")
    return kind

# How often each mutator is picked when a candidate mutates (normalized over the mutators
# that apply to it): tile sizes matter most on CPUs and GPUs.
DEFAULT_MUTATOR_PROBS = {
    "cpu": {"tile-size": 0.9, "compute-location": 0.05, "unroll": 0.03, "parallel": 0.02},
    # (with multi-level tiling's `prefetch` enabled, add "prefetch" here: MutatePrefetch)
    "cuda": {"tile-size": 0.9, "unroll": 0.08, "thread-binding": 0.02},
}

# EvolutionarySearch, sized for a 2-core machine: a generation costs about
# population_size * genetic_num_iters replays, postprocessings and feature extractions,
# which must stay a small part of the time spent building and measuring a batch.
DEFAULT_EVOLUTIONARY = {
    "population_size": None,       # candidates per generation; None: 3 per trial of a batch,
                                   # within [48, 384]
    "init_measured_ratio": 0.2,    # share of the first generation taken from the best measured
    "init_min_unmeasured": 48,     # fresh samples in the first generation, at least
    "genetic_num_iters": 3,        # generations per batch
    "genetic_mutate_prob": 0.85,   # a child is a mutant (else a copy of its parent)
    "genetic_max_fail_count": 8,   # tries to mutate one parent into a new valid child
    "eps_greedy": 0.05,            # share of each batch picked at random, not by the model
    "space_floor_share": 0.25,     # share of each batch (and of each generation's parents)
                                   # split evenly over the design spaces; the rest goes to
                                   # each space in proportion to
    "space_focus": 4.0,            # (fastest measured / the space's fastest) ** space_focus:
                                   # a space whose best runs 1.2x the fastest gets half the
                                   # weight, 1.6x a seventh. None: no shares, the
                                   # model ranks all spaces' candidates together
    "transfer_records": 0,         # > 0: a model with nothing to learn from on this workload
                                   # first trains on up to this many newest records of other
                                   # workloads in the database, on the same target key
                                   # (transfer). Off: on Zen 4, from matmul 512 + conv2d
                                   # records (benchmarks/transfer.py, 3 seeds, 64 trials) it
                                   # found 0.97x the prior's best on matmul_add 1024 and
                                   # 1.04x on a stride-2 conv2d: no gain over the prior
    "max_fail_count": 64,          # fresh samples that may fail in a row before giving up
    "search_workers": None,        # processes that replay the search's candidates; None:
                                   # LOOPTUNE_WORKERS, else one per CPU this process may run
                                   # on, up to 8; 0 or 1: all in the tuner's process
                                   # (search_strategy/workers.py)
    "max_search_share": 0.2,       # a batch stops evolving once its search has taken
                                   # share / (1 - share) of the previous batch's build and run
                                   # time: search stays near this share of the wall time when
                                   # kernels are quick to build and run (None: no cap)
}


def default_mutators(target) -> dict:
    """{Mutator instance: probability} for the target's kind."""
    from .mutator.base import Mutator
    probs = DEFAULT_MUTATOR_PROBS.get(target.kind)
    if probs is None:
        raise TuneError(f"no default mutators for target kind {target.kind!r} yet; pass "
                        f"mutator_probs= explicitly (have: {', '.join(DEFAULT_MUTATOR_PROBS)})")
    return {Mutator.create(name): p for name, p in probs.items()}
