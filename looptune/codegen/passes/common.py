"""Walking lowered statements with the loop ranges in scope."""
from __future__ import annotations

from ...tir.stmt import Allocate, BufferStore, Evaluate, For, IfThenElse, SeqStmt, seq


def map_exprs(stmt, fn, dom: dict | None = None):
    """Rebuild `stmt` with fn(expr, dom) applied to every top-level expression (store values
    and indices, conditions), where dom maps loop vars in scope to (0, extent - 1)."""
    dom = dict(dom or {})

    def walk(s, dom):
        if isinstance(s, For):
            inner = dict(dom)
            inner[s.loop_var] = (0, s.extent - 1)
            return For(s.loop_var, s.extent, s.kind, walk(s.body, inner), s.thread, s.annotations)
        if isinstance(s, SeqStmt):
            return seq(*(walk(x, dom) for x in s.stmts))
        if isinstance(s, IfThenElse):
            return IfThenElse(fn(s.cond, dom), walk(s.then_case, dom),
                              None if s.else_case is None else walk(s.else_case, dom))
        if isinstance(s, Allocate):
            return Allocate(s.buffer, walk(s.body, dom))
        if isinstance(s, BufferStore):
            return BufferStore(s.buffer, fn(s.value, dom), tuple(fn(i, dom) for i in s.indices))
        if isinstance(s, Evaluate):
            return Evaluate(fn(s.value, dom))
        return s

    return walk(stmt, dom)
