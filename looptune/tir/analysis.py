"""Analyses over blocks: the buffer regions a block body reads and writes."""
from __future__ import annotations

from .arith import simplify
from .expr import BufferLoad, IntImm
from .functor import find_stmts, visit
from .stmt import BufferRegion, BufferStore


def _region(buffer, index_lists) -> BufferRegion:
    """The smallest box covering the index tuples (point accesses of one block instance)."""
    dims = []
    for d in range(buffer.ndim):
        first = index_lists[0][d]
        lo = hi = 0
        exact = True
        for idx in index_lists[1:]:
            diff = simplify(idx[d] - first)
            if not isinstance(diff, IntImm):
                exact = False
                break
            lo, hi = min(lo, diff.value), max(hi, diff.value)
        if exact:
            dims.append((simplify(first + lo) if lo else first, hi - lo + 1))
        else:
            dims.append((IntImm(0), buffer.shape[d]))
    return BufferRegion(buffer, tuple(dims))


def access_regions(body, init=None) -> tuple[tuple, tuple]:
    """(reads, writes) of a block body: one region per buffer, in order of first access.
    A buffer that is written is not also listed as read (a reduction's self-update)."""
    loads: dict = {}
    stores: dict = {}

    def fn(n):
        if isinstance(n, BufferLoad):
            loads.setdefault(n.buffer, []).append(n.indices)
        elif isinstance(n, BufferStore):
            stores.setdefault(n.buffer, []).append(n.indices)

    visit(body, fn)
    if init is not None:
        visit(init, fn)
    writes = tuple(_region(b, idx) for b, idx in stores.items())
    reads = tuple(_region(b, idx) for b, idx in loads.items() if b not in stores)
    return reads, writes


def flop_count(func) -> float:
    """Floating-point operations of a function: per block, the arithmetic operations and
    intrinsics of its body on float values, times its iteration space."""
    from math import prod

    from .expr import Binary, Call
    from .stmt import BlockRealize
    from . import dtype as dt

    total = 0.0

    def ops(e) -> int:
        n = 0

        def fn(x):
            nonlocal n
            if isinstance(x, (Binary, Call)) and dt.is_float(x.dtype):
                n += 1
            elif isinstance(x, Binary) and x.op in ("<", "<=", ">", ">=") and dt.is_float(x.a.dtype):
                n += 1
        visit(e, fn)
        return n

    for br in find_stmts(func.body, BlockRealize):
        b = br.block
        if b.name != "root":
            total += ops(b.body) * prod(iv.extent for iv in b.iter_vars)
    return total
