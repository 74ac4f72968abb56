"""The lowering pipeline: scheduled PrimFunc -> flat, loop-only IR ready to render.

It runs in two stages so a tuning candidate is analysed once and shared: `lower_loops`
(blocks to loops, buffer compaction, unroll marking) is cheap and is what verification and
the cost model's features read; `finish_lowering` (loop partitioning, explicit unrolling,
flattening, vectorization) produces what the renderer prints.

`vector_bits` is the target's SIMD register width (`Target.vector_bits`: 256 with AVX2, 512
with AVX-512); None means this host's. Stage 1 uses it to count a vectorized loop as the
vector statements it becomes when budgeting unrolling, stage 2 to cut vectors to it."""
from __future__ import annotations

from ..target import Target
from ..tir.func import PrimFunc
from .passes import (accumulation_loops, auto_unroll, compact_buffers, flatten, lower_blocks,
                     lower_intdiv, partition_loops, partition_selects, unroll_explicit,
                     vectorize_loops)
from .passes.check_index import check_indices
from .passes.prefetch import prefetch_next
from .passes.tensorize import tensorize_loops
from .passes.unit_loops import drop_unit_loops
from .passes.unroll import cap_unrolling, copied_terms_last, folds_per_copy
from .passes.widen import widen_indices


def host_vector_bits(vector_bits: int | None) -> int:
    return Target.create("cpu").vector_bits if vector_bits is None else int(vector_bits)


def lower_loops(func: PrimFunc, *, vector_bits: int | None = None) -> PrimFunc:
    """Stage 1: loops only (no blocks), compacted buffers, and the loops to unroll marked
    `unrolled` (explicit copies are made in stage 2). Guards of non-dividing splits are still
    in place: partitioning them off, which can copy loop nests many times, is stage 2's.
    A function bound to GPU threads gets the GPU's stage 1 (codegen.gpu.lower_gpu_loops)."""
    from .gpu.lower import is_gpu_func, lower_gpu_loops
    if is_gpu_func(func):
        return lower_gpu_loops(func, vector_bits or 128)
    f = compact_buffers(lower_blocks(func), accumulation_loops(func))
    return f.with_body(auto_unroll(f.body, vector_bits=host_vector_bits(vector_bits)))


def finish_lowering(loops: PrimFunc, *, vectorize: bool = True,
                    vector_bits: int | None = None) -> PrimFunc:
    """Stage 2, on the output of `lower_loops`: loop partitioning (at the guards of
    non-dividing splits, and innermost loops at their selections: padding), flattening (with
    simplification; indices loaded from memory checked first, passes/check_index.py),
    vectorization, C integer division and 64-bit index arithmetic where int32 could
    overflow (passes/widen.py); software prefetches where a loop asks for them
    (passes/prefetch.py; compiled code only: `vectorize=False` is the interpreter's), and
    before all of it, nests marked by Schedule.tensorize replaced by their tensor intrinsic's
    call (passes/tensorize.py; compiled code only too).
    Loops to unroll explicitly mostly stay loops here and the renderer prints their copies,
    so the passes run on one copy; only those whose copies simplify differently
    (`folds_per_copy`) are copied first."""
    lanes = max(1, host_vector_bits(vector_bits) // 32)
    body = tensorize_loops(loops.body) if vectorize else loops.body
    body = drop_unit_loops(partition_loops(partition_selects(drop_unit_loops(body))))
    body = cap_unrolling(body, lanes=lanes)
    body = unroll_explicit(body, only=folds_per_copy)
    if vectorize:
        body = prefetch_next(body, loops.params)
    f = flatten(check_indices(loops.with_body(body)))
    if not vectorize:
        return f.with_body(widen_indices(f.body))
    body = vectorize_loops(f.body, host_vector_bits(vector_bits), bf16_as_float32=True)
    return f.with_body(widen_indices(copied_terms_last(lower_intdiv(body))))


def lower(func: PrimFunc, *, vectorize: bool = True, vector_bits: int | None = None) -> PrimFunc:
    """Both stages. `vectorize=False` stops before vectorization (for the interpreter)."""
    return finish_lowering(lower_loops(func, vector_bits=vector_bits), vectorize=vectorize,
                           vector_bits=vector_bits)
