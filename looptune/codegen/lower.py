"""The lowering pipeline: scheduled PrimFunc -> flat, loop-only IR ready to render."""
from __future__ import annotations

from ..tir.func import PrimFunc
from .passes import (accumulation_loops, auto_unroll, compact_buffers, flatten, partition_loops, lower_blocks, lower_intdiv, unroll_explicit,
                     vectorize_loops)


def lower(func: PrimFunc, *, vectorize: bool = True, vector_bits: int = 256) -> PrimFunc:
    """Blocks to loops, buffer compaction, loop partitioning, unrolling, flattening (with simplification), vectorization, and C
    integer division. `vectorize=False` stops before vectorization (for the interpreter);
    `vector_bits` is the target's SIMD register width."""
    f = compact_buffers(lower_blocks(func), accumulation_loops(func))
    f = f.with_body(unroll_explicit(auto_unroll(partition_loops(f.body))))
    f = flatten(f)
    if not vectorize:
        return f
    return f.with_body(lower_intdiv(vectorize_loops(f.body, vector_bits)))
