"""Walking lowered statements: rebuild a statement's children, track loop ranges in scope."""
from __future__ import annotations

from ...tir.stmt import Allocate, BufferStore, Evaluate, For, IfThenElse, SeqStmt, seq


def map_children(s, f):
    """s with f applied to each direct child statement (a loop's body, a sequence's items, a
    condition's branches, an allocation's body); any other statement is returned as is."""
    if isinstance(s, For):
        body = f(s.body)
        if body is s.body:
            return s
        return For(s.loop_var, s.extent, s.kind, body, s.thread, s.annotations)
    if isinstance(s, SeqStmt):
        return seq(*(f(x) for x in s.stmts))
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, f(s.then_case), None if s.else_case is None else f(s.else_case))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, f(s.body))
    return s


def inside(dom: dict, loop: For) -> dict:
    """The loop ranges in scope inside `loop`."""
    out = dict(dom)
    out[loop.loop_var] = (0, loop.extent - 1)
    return out


def map_exprs(stmt, fn, dom: dict | None = None):
    """Rebuild `stmt` with fn(expr, dom) applied to every top-level expression (store values
    and indices, conditions), where dom maps loop vars in scope to (0, extent - 1)."""
    def walk(s, dom):
        if isinstance(s, For):
            inner = inside(dom, s)
            return map_children(s, lambda x: walk(x, inner))
        if isinstance(s, IfThenElse):
            return IfThenElse(fn(s.cond, dom), walk(s.then_case, dom),
                              None if s.else_case is None else walk(s.else_case, dom))
        if isinstance(s, BufferStore):
            return BufferStore(s.buffer, fn(s.value, dom), tuple(fn(i, dom) for i in s.indices))
        if isinstance(s, Evaluate):
            return Evaluate(fn(s.value, dom))
        return map_children(s, lambda x: walk(x, dom))

    return walk(stmt, dict(dom or {}))
