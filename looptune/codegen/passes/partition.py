"""Loop partitioning: split a loop into a main part where the guards of non-dividing splits
are provably true (and removed) and a tail that keeps them.

    for i0 in 0..11: for i2 in 0..6: if i0*6 + i2 < 64: S
 -> for i0 in 0..10: for i2 in 0..6: S                     (no guard: vectorizes, unrolls)
    for i0 in 10..11: for i2 in 0..6: if i0*6 + i2 < 64: S   (a big tail stays rolled)
"""
from __future__ import annotations

from ...tir.arith import INF, Simplifier
from ...tir.expr import Binary, Var, binary, const
from ...tir.functor import map_children, stmt_children, substitute, uses_var
from ...tir.stmt import Comment, For, IfThenElse, SeqStmt, seq
from .common import inside
from .lower_blocks import simplify_conditions
from .unroll import explicit

MAX_PARTITIONS = 64  # bound on code growth per function
TAIL_UNROLL_BUDGET = 256  # a tail whose copies would emit more statements stays rolled


def partition_loops(stmt):
    budget = [MAX_PARTITIONS]
    return _walk(stmt, {}, budget)


def _walk(s, dom, budget):
    if isinstance(s, For):
        if budget[0] > 0 and s.kind in ("serial", "parallel", "unrolled", "vectorized"):
            t = _main_extent(s, dom)
            if 0 < t < s.extent:
                budget[0] -= 1
                return _split(s, t, dom, budget)
        inner = inside(dom, s)
        return map_children(s, lambda x: _walk(x, inner, budget))
    return map_children(s, lambda x: _walk(x, dom, budget))


def _split(loop: For, t: int, dom, budget):
    v = loop.loop_var
    main_dom = dict(dom)
    main_dom[v] = (0, t - 1)
    main_body = simplify_conditions(loop.body, main_dom)
    main = For(v, t, loop.kind, _walk(main_body, main_dom, budget), loop.thread, loop.annotations)
    tail_var = Var(v.name + "_tail", v.dtype)
    tail_body = substitute(loop.body, {v: binary("+", tail_var, const(t, v.dtype))})
    tail_dom = dict(dom)
    tail_dom[tail_var] = (0, loop.extent - t - 1)
    tail_body = simplify_conditions(tail_body, tail_dom)
    if _empty(tail_body):  # the guards are false for the whole tail
        return main
    if _emitted(tail_body) > TAIL_UNROLL_BUDGET:
        tail_body = _rolled(tail_body)
    tail = For(tail_var, loop.extent - t, loop.kind, tail_body, loop.thread, loop.annotations)
    note = Comment(f"{v.name} = {t}..{loop.extent - 1}: the part of a non-dividing split that "
                   "keeps its guards")
    return seq(main, note, _walk(tail, dom, budget))


def _emitted(s) -> int:
    """The statements s becomes once explicit unrolling has copied its loops."""
    if isinstance(s, For):
        return _emitted(s.body) * (s.extent if explicit(s) else 1)
    kids = stmt_children(s)
    if not kids and not isinstance(s, SeqStmt):
        return 1  # a store, a comment, ...; an empty sequence emits nothing
    return sum(_emitted(x) for x in kids)


def _rolled(s):
    """s with its unrolled loops kept as loops. Unrolling a big tail (its copies, or the C
    compiler's) doubled the code of nested non-dividing tiles and with it compile time;
    small tails keep their unrolling, which is worth up to 1.5x on a matmul whose tail is
    a sixth of the work."""
    s = map_children(s, _rolled)
    if isinstance(s, For) and s.kind == "unrolled":
        return For(s.loop_var, s.extent, "serial", s.body, s.thread, s.annotations)
    return s


def _empty(s) -> bool:
    if isinstance(s, SeqStmt):
        return all(_empty(x) for x in s.stmts)
    if isinstance(s, For):
        return _empty(s.body)
    return False


def _main_extent(loop: For, dom) -> int:
    """The largest t such that every guard in the loop that depends on it with a positive
    coefficient holds for all iterations with loop var < t; `loop.extent` if none does."""
    v = loop.loop_var
    full = dict(dom)
    full[v] = (0, loop.extent - 1)
    conds = []
    _guards(loop.body, full, conds)
    t = loop.extent
    found = False
    for c, cdom in conds:
        aff = Simplifier(cdom).affine(binary("-", c.a, c.b))
        if c.op == "<=":
            aff.const -= 1  # a <= b  <=>  a - b - 1 < 0
        term = aff.terms.get(v)
        if term is None or term[1] <= 0:
            continue
        a = term[1]
        rest = aff.copy()
        del rest.terms[v]
        if uses_var(rest.to_expr(), {v}):
            continue  # the loop variable also sits inside a min/max/div: not monotone here
        _, hi = rest.bound(cdom)
        if hi == INF:
            continue
        # a*v + rest < 0 for every rest  <=>  a*v + hi < 0  <=>  v <= (-hi - 1) // a
        tc = max(0, int((-hi - 1) // a) + 1)
        if tc < loop.extent:
            found = True
            t = min(t, tc)
    return t if found else loop.extent


def _guards(s, dom, out):
    """Conjuncts `a < b` / `a <= b` of the conditions inside s, with the loop ranges there."""
    if isinstance(s, For):
        dom = inside(dom, s)
    elif isinstance(s, IfThenElse):
        for c in _conjuncts(s.cond):
            if isinstance(c, Binary) and c.op in ("<", "<=") and c.a.dtype.startswith("int"):
                out.append((c, dom))
    for x in stmt_children(s):
        _guards(x, dom, out)


def _conjuncts(e):
    if isinstance(e, Binary) and e.op == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]

