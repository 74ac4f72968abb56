"""Symbolic bounds: the range an expression covers while some variables sweep their ranges.

This is region analysis: for an access A[i0*32 + i1] inside loop i1 in [0, 32), relaxing i1
gives [i0*32, i0*32 + 31], still in terms of the outer loop variable i0.
"""
from __future__ import annotations

from ..expr import Binary, IntImm, PrimExpr, Var, binary
from ..functor import uses_var
from .interval import INF
from .simplify import Affine, Simplifier


def eval_bound(e: PrimExpr, relax: dict, dom: dict | None = None):
    """(min_expr, max_expr) of integer `e` as the variables of `relax` ({Var: (lo, hi)}) sweep
    their ranges; the other variables stay symbolic (their ranges in `dom` help simplify).
    Returns None when no bound can be given (e.g. an index loaded from memory)."""
    dom = dict(dom or {})
    dom.update(relax)
    simp = Simplifier(dom)
    res = _bound(simp.affine(e), relax, simp)
    if res is None:
        return None
    lo, hi = res
    outer = Simplifier({v: r for v, r in dom.items() if v not in relax})
    return outer(lo), outer(hi)


def _bound(aff: Affine, relax: dict, simp: Simplifier):
    lo = Affine({}, aff.const, aff.dtype)
    hi = Affine({}, aff.const, aff.dtype)
    relaxed = relax.keys()
    for key, (atom, coef) in aff.terms.items():
        if isinstance(atom, Var):
            if atom in relax:
                a_lo, a_hi = relax[atom]
                rng = (Affine({}, a_lo, aff.dtype), Affine({}, a_hi, aff.dtype))
            else:
                rng = (Affine.atom(atom), Affine.atom(atom))
        elif not uses_var(atom, relaxed):
            rng = (Affine.atom(atom), Affine.atom(atom))
        else:
            rng = _atom_bound(atom, relax, simp)
            if rng is None:
                return None
        a_lo, a_hi = rng
        if coef > 0:
            lo, hi = lo.add(a_lo.scale(coef)), hi.add(a_hi.scale(coef))
        else:
            lo, hi = lo.add(a_hi.scale(coef)), hi.add(a_lo.scale(coef))
    return lo.to_expr(), hi.to_expr()


def _atom_bound(atom, relax, simp: Simplifier):
    """Bounds of a non-affine atom that depends on relaxed variables, as Affine pairs."""
    if not isinstance(atom, Binary):
        return None
    op = atom.op
    if op in ("//", "%") and isinstance(atom.b, IntImm) and atom.b.value > 0:
        c = atom.b.value
        inner = _bound(simp.affine(atom.a), relax, simp)
        if inner is None:
            return None
        lo, hi = inner
        if op == "//":
            return simp.affine(binary("//", lo, c)), simp.affine(binary("//", hi, c))
        # floormod: exact when the whole range stays inside one period, else [0, c-1]
        width = simp.affine(hi).add(simp.affine(lo), -1)
        same_period = simp.affine(binary("//", hi, c)).add(simp.affine(binary("//", lo, c)), -1)
        if width.is_const() and same_period.is_const() and same_period.const == 0:
            return simp.affine(binary("%", lo, c)), simp.affine(binary("%", hi, c))
        return Affine({}, 0, atom.dtype), Affine({}, c - 1, atom.dtype)
    if op in ("min", "max"):
        a = _bound(simp.affine(atom.a), relax, simp)
        b = _bound(simp.affine(atom.b), relax, simp)
        if a is None or b is None:
            return None
        return (simp.affine(binary(op, a[0], b[0])), simp.affine(binary(op, a[1], b[1])))
    return None


def const_extent(lo: PrimExpr, hi: PrimExpr, dom: dict) -> int | None:
    """The number of values in [lo, hi]: exact if constant, else the largest over `dom`.
    Subtraction is pushed through min/max (as clamping to a buffer's bounds produces):
    min(x, y) - lo <= min(x - lo, y - lo) and hi - max(x, y) <= min(hi - x, hi - y)."""
    top = _upper_diff(hi, lo, Simplifier(dom), dom)
    return None if top == INF else int(top) + 1


def _upper_diff(hi, lo, s: Simplifier, dom) -> float:
    """An upper bound of hi - lo."""
    if isinstance(hi, Binary) and hi.op in ("min", "max"):
        a, b = _upper_diff(hi.a, lo, s, dom), _upper_diff(hi.b, lo, s, dom)
        return min(a, b) if hi.op == "min" else max(a, b)
    if isinstance(lo, Binary) and lo.op in ("min", "max"):
        a, b = _upper_diff(hi, lo.a, s, dom), _upper_diff(hi, lo.b, s, dom)
        return min(a, b) if lo.op == "max" else max(a, b)
    d = s.affine(hi).add(s.affine(lo), -1)
    if d.is_const():
        return d.const
    return d.bound(dom)[1]


__all__ = ["eval_bound", "const_extent"]
