"""Walking lowered statements with the loop ranges in scope."""
from __future__ import annotations

from ...tir.functor import map_children
from ...tir.stmt import BufferStore, Evaluate, For, IfThenElse


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
