"""The anchor block of a function: its dominant compute block, and a key for it alone.

Fused variants of one computation (matmul, matmul + relu, matmul + bias) share the anchor
block, so keying tuning records by it lets a variant reuse the records of the plain kernel.
"""
from __future__ import annotations

import hashlib
from math import prod

from .func import PrimFunc
from .functor import visit
from .stmt import Block
from .structural import canonical

ANCHOR_KEY_VERSION = 1


def _blocks(func: PrimFunc) -> list:
    out: list = []
    visit(func.body, lambda n: out.append(n) if isinstance(n, Block) else None)
    return [b for b in out if b is not func.root]


def _space(block: Block) -> int:
    return prod(iv.extent for iv in block.iter_vars)


def anchor_block(func: PrimFunc) -> Block:
    """The reduction block with the largest iteration space (the product of its iter var
    extents); without reductions, the largest block. Ties go to the first in program order.
    The root block is never the anchor."""
    blocks = _blocks(func)
    if not blocks:
        raise ValueError(f"function {func.name} has no block besides the root; it has no anchor")
    reductions = [b for b in blocks if b.is_reduction]
    pool = reductions or blocks
    best = pool[0]
    for b in pool[1:]:
        if _space(b) > _space(best):
            best = b
    return best


def anchor_key(func: PrimFunc) -> str:
    """A 16-hex-digit sha256 of the anchor block alone: its name, iter vars, regions, init and
    body, with variables and buffers numbered by first appearance (buffers with dtype, shape,
    scope and layout), as structural_hash does. Names of variables and buffers do not count."""
    b = anchor_block(func)
    text = canonical(("anchor", ANCHOR_KEY_VERSION, b.name, b.iter_vars, b.reads, b.writes,
                      b.init, b.body))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
