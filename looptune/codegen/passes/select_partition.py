"""Loop partitioning at selections: an innermost loop whose body selects on its variable
(padding, boundary clamps) is cut where the selection changes, so that each part selects
nothing and its body becomes a plain, vectorizable copy.

    for x in 0..58: pad[x] = select(x >= 1 and x < 57, X[x - 1], 0)
 -> for x in 0..1: pad[x] = 0
    for x in 0..56: pad[x + 1] = X[x]
    for x in 0..1: pad[x + 57] = 0

Only conditions whose switch point is a constant are used (those that also depend on an
outer loop are left to the C compiler, which hoists them). Flattening's simplification, with
each part's range, folds the selections that became constant.
"""
from __future__ import annotations

from ...tir.arith import Simplifier
from ...tir.expr import Binary, Select, Var, binary, const
from ...tir.functor import find_stmts, map_children, substitute, visit
from ...tir.stmt import Comment, For, seq
from .common import inside

MAX_PIECES = 4          # parts one loop may be cut into
MAX_LOOPS = 64          # bound on code growth per function
_CMP = ("<", "<=", ">", ">=")


def partition_selects(stmt):
    budget = [MAX_LOOPS]
    return _walk(stmt, {}, budget)


def _walk(s, dom, budget):
    if isinstance(s, For) and not find_stmts(s.body, For, stop=For):
        cuts = _cuts(s, dom) if budget[0] > 0 else []
        if cuts:
            budget[0] -= 1
            return _split(s, cuts)
        return s
    if isinstance(s, For):
        inner = inside(dom, s)
        return map_children(s, lambda x: _walk(x, inner, budget))
    return map_children(s, lambda x: _walk(x, dom, budget))


def _cuts(loop: For, dom) -> list[int]:
    """The iterations, strictly inside the loop, where one of its selections switches."""
    v = loop.loop_var
    full = inside(dom, loop)
    conds = []

    def collect(e):
        if isinstance(e, Select):
            conds.extend(_conjuncts(e.cond))

    visit(loop.body, collect)
    cuts = set()
    simp = Simplifier(full)
    for c in conds:
        if not (isinstance(c, Binary) and c.op in _CMP and c.a.dtype.startswith("int")):
            continue
        aff = simp.affine(binary("-", c.a, c.b))
        term = aff.terms.get(v)
        if term is None or len(aff.terms) != 1 or term[1] not in (1, -1):
            continue  # not `±v + constant op 0`
        a, k = term[1], aff.const
        # the condition changes between v = t - 1 and v = t where a*v + k crosses its bound
        t = {"<": -k, ">=": -k, "<=": -k + 1, ">": -k + 1}[c.op] if a == 1 else \
            {"<": k + 1, ">=": k + 1, "<=": k, ">": k}[c.op]
        if 0 < t < loop.extent:
            cuts.add(int(t))
    cuts = sorted(cuts)
    return cuts if len(cuts) < MAX_PIECES else []


def _split(loop: For, cuts: list[int]):
    v = loop.loop_var
    bounds = [0] + cuts + [loop.extent]
    parts = [Comment(f"{v.name}: cut at {', '.join(map(str, cuts))} where its selections "
                     "switch")]
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        pv = Var(f"{v.name}_p{i}", v.dtype)
        body = substitute(loop.body, {v: binary("+", pv, const(lo, v.dtype))})
        parts.append(For(pv, hi - lo, loop.kind, body, loop.thread, loop.annotations))
    return seq(*parts)


def _conjuncts(e):
    if isinstance(e, Binary) and e.op == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]
