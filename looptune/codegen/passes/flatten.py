"""Flatten buffers to one dimension: A[i, j] -> A[i * stride0 + j * stride1], then simplify
every index and condition with the loop ranges."""
from __future__ import annotations

from ...tir.arith import Simplifier
from ...tir.buffer import Buffer
from ...tir.expr import BufferLoad, IntImm, binary, const
from ...tir.func import PrimFunc
from ...tir.functor import map_children, transform
from ...tir.stmt import Allocate, BufferStore, Evaluate, For, IfThenElse, SeqStmt, seq
from .common import inside


def flat_buffer(b: Buffer) -> Buffer:
    return Buffer(b.name, (b.size,), b.dtype, b.scope)


def _offset(b: Buffer, indices, simp: Simplifier):
    out = None
    for idx, stride in zip(indices, b.layout_strides()):
        term = binary("*", idx, const(stride, idx.dtype)) if stride != 1 else idx
        out = term if out is None else binary("+", out, term)
    return simp(out if out is not None else const(0))


def flatten(func: PrimFunc) -> PrimFunc:
    bmap = {b: flat_buffer(b) for b in func.params}

    def walk(s, dom):
        if isinstance(s, For):
            inner = inside(dom, s)
            body = walk(s.body, inner)
            if isinstance(body, SeqStmt) and not body.stmts:
                return body  # a condition proved the loop body dead
            return map_children(s, lambda _: body)
        if isinstance(s, IfThenElse):
            simp = Simplifier(dom)
            c = simp.cond(exprs(s.cond, simp))
            if isinstance(c, IntImm):
                if c.value:
                    return walk(s.then_case, dom)
                return walk(s.else_case, dom) if s.else_case is not None else seq()
            return IfThenElse(c, walk(s.then_case, dom),
                              None if s.else_case is None else walk(s.else_case, dom))
        if isinstance(s, Allocate):
            bmap[s.buffer] = flat_buffer(s.buffer)
            return Allocate(bmap[s.buffer], walk(s.body, dom))
        if isinstance(s, BufferStore):
            simp = Simplifier(dom)
            b = s.buffer
            return BufferStore(bmap[b], exprs(s.value, simp), (_offset(b, s.indices, simp),))
        if isinstance(s, Evaluate):
            return Evaluate(exprs(s.value, Simplifier(dom)))
        return map_children(s, lambda x: walk(x, dom))

    def exprs(e, simp):
        def fn(n):
            if isinstance(n, BufferLoad) and n.buffer in bmap:
                return BufferLoad(bmap[n.buffer], (_offset(n.buffer, n.indices, simp),), n.dtype)
            return n
        return simp(transform(e, fn))

    body = walk(func.body, {})
    return PrimFunc(func.name, tuple(bmap[b] for b in func.params), body, func.attrs)
