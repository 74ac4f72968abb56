"""Checked gathers: an index computed from memory (A[I[i]]) is compared with the axis it
indexes before the access, and an out-of-range one makes the kernel fail with an error that
names the buffer, the axis and the value (codegen/c.py renders the check, runtime/module.py
raises IndexRangeError) instead of reading or writing out of bounds. Indices whose range is
known statically - affine in the loops, or clamped - get no check and cost nothing.

A check is `Call(INDEX_CHECK_OP, (index, size, wrap, site))`: the index itself when it lies in
[0, size) (with `wrap`, [-size, size), a negative one counting from the end, as ONNX and numpy
do), else 0 - a safe element - after recording (site, index) for the kernel's error. Sites
number from 1 in the function's attribute INDEX_SITES: (buffer name, axis, size, wrap, the
buffer's position among the parameters or -1)."""
from __future__ import annotations

from ...tir.arith.interval import const_bound
from ...tir.expr import INDEX_CHECK_OP, Binary, BufferLoad, Call, IntImm, Select, const
from ...tir.func import PrimFunc
from ...tir.functor import transform, visit
from ...tir.stmt import BufferStore, For
from ...tir.structural import structural_equal

INDEX_SITES = "index_sites"


def _unwrapped(idx, size: int):
    """(x, True) for idx == `x + size if x < 0 else x` (graph.op.gather.read_index's
    spelling of an index that counts from the end when negative), else (idx, False)."""
    if not (isinstance(idx, Select) and isinstance(idx.cond, Binary) and idx.cond.op == "<"
            and isinstance(idx.cond.b, IntImm) and idx.cond.b.value == 0):
        return idx, False
    t, x = idx.true_value, idx.false_value
    if (isinstance(t, Binary) and t.op == "+" and isinstance(t.b, IntImm) and t.b.value == size
            and structural_equal(t.a, x) and structural_equal(idx.cond.a, x)):
        return x, True
    return idx, False


def _same(a, b) -> bool:
    return all(x is y for x, y in zip(a, b))


def _from_memory(e) -> bool:
    found = []
    visit(e, lambda n: found.append(n) if isinstance(n, BufferLoad) else None)
    return bool(found)


def check_indices(func: PrimFunc) -> PrimFunc:
    """`func` (loops, not yet flattened) with a check on every index loaded from memory whose
    range is not known to lie inside its axis."""
    dom = {}
    visit(func.body, lambda n: dom.__setitem__(n.loop_var, (0, n.extent - 1))
          if isinstance(n, For) else None)
    sites: list = []

    def checked(buf, indices):
        out = []
        for axis, (idx, size) in enumerate(zip(indices, buf.shape)):
            lo, hi = const_bound(idx, dom)
            if (lo >= 0 and hi < size) or not _from_memory(idx):
                out.append(idx)
                continue
            x, wrap = _unwrapped(idx, size)
            param = next((k for k, p in enumerate(func.params) if p is buf), -1)
            sites.append((buf.name, axis, int(size), wrap, param))
            args = (x, const(int(size), "int64"), const(int(wrap)), const(len(sites)))
            out.append(Call(INDEX_CHECK_OP, args, x.dtype))
        return tuple(out)

    def fn(n):
        if isinstance(n, BufferLoad):
            idx = checked(n.buffer, n.indices)
            return n if _same(idx, n.indices) else BufferLoad(n.buffer, idx, n.dtype)
        if isinstance(n, BufferStore):
            idx = checked(n.buffer, n.indices)
            return n if _same(idx, n.indices) else BufferStore(n.buffer, n.value, idx)
        return n

    body = transform(func.body, fn)
    if not sites:
        return func
    return PrimFunc(func.name, func.params, body, func.attrs + ((INDEX_SITES, tuple(sites)),))
