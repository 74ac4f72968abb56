"""Analyses over blocks: the buffer regions a block body reads and writes."""
from __future__ import annotations

from .arith import simplify
from .expr import BufferLoad, IntImm
from .functor import visit
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
