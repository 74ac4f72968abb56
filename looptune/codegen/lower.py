"""The lowering pipeline: scheduled PrimFunc -> flat, loop-only IR ready to render.

It runs in two stages so a tuning candidate is analysed once and shared: `lower_loops`
(blocks to loops, buffer compaction, unroll marking) is cheap and is what verification and
the cost model's features read; `finish_lowering` (loop partitioning, explicit unrolling,
flattening, vectorization) produces what the renderer prints."""
from __future__ import annotations

from ..tir.func import PrimFunc
from .passes import (accumulation_loops, auto_unroll, compact_buffers, flatten, lower_blocks,
                     lower_intdiv, partition_loops, unroll_explicit, vectorize_loops)


def lower_loops(func: PrimFunc) -> PrimFunc:
    """Stage 1: loops only (no blocks), compacted buffers, and the loops to unroll marked
    `unrolled` (explicit copies are made in stage 2). Guards of non-dividing splits are still
    in place: partitioning them off, which can copy loop nests many times, is stage 2's."""
    f = compact_buffers(lower_blocks(func), accumulation_loops(func))
    return f.with_body(auto_unroll(f.body))


def finish_lowering(loops: PrimFunc, *, vectorize: bool = True,
                    vector_bits: int = 256) -> PrimFunc:
    """Stage 2, on the output of `lower_loops`: loop partitioning, explicit unrolling,
    flattening (with simplification), vectorization and C integer division."""
    f = flatten(loops.with_body(unroll_explicit(partition_loops(loops.body))))
    if not vectorize:
        return f
    return f.with_body(lower_intdiv(vectorize_loops(f.body, vector_bits)))


def lower(func: PrimFunc, *, vectorize: bool = True, vector_bits: int = 256) -> PrimFunc:
    """Both stages. `vectorize=False` stops before vectorization (for the interpreter);
    `vector_bits` is the target's SIMD register width."""
    return finish_lowering(lower_loops(func), vectorize=vectorize, vector_bits=vector_bits)
