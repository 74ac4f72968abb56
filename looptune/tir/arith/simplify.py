"""Simplification of integer index expressions, as produced by split, fuse and compute_at.

Integer expressions are normalised to an affine form sum(coef * atom) + const, where an atom
is a variable or a non-affine piece (floordiv, floormod, min, a load, ...). floordiv and
floormod by constants are simplified with the ranges of the variables:

    (c*q + r) // c  == q + r // c            (exact, for any integer q)
    (g*x + k) // (g*m) == (x + k//g) // m     (gcd reduction)
    (a*h + l) // (a*m) == h // m   when 0 <= l < a  (the split-of-fused pattern)
    r // c == 0 and r % c == r     when 0 <= r < c
"""
from __future__ import annotations

from math import gcd

from .. import dtype as dt
from ..expr import (Binary, BufferLoad, Call, Cast, IntImm, Not, PrimExpr, Select, Var, binary,
                    const)
from .interval import INF, const_bound

_CMP = ("<", "<=", ">", ">=", "==", "!=")


def atom_key(e):
    """A hashable structural key: equal keys mean the same value."""
    if isinstance(e, Var):
        return e
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Binary):
        return (e.op, atom_key(e.a), atom_key(e.b))
    if isinstance(e, Cast):
        return ("cast", e.dtype, atom_key(e.value))
    if isinstance(e, BufferLoad):
        return ("load", e.buffer, tuple(atom_key(i) for i in e.indices))
    return e


class Affine:
    """sum(coef * atom) + const, with atoms keyed structurally."""

    __slots__ = ("terms", "const", "dtype")

    def __init__(self, terms=None, k=0, dtype="int32"):
        self.terms: dict = terms if terms is not None else {}  # key -> [atom, coef]
        self.const = k
        self.dtype = dtype

    @staticmethod
    def atom(e) -> "Affine":
        return Affine({atom_key(e): [e, 1]}, 0, e.dtype)

    def copy(self) -> "Affine":
        return Affine({k: [a, c] for k, (a, c) in self.terms.items()}, self.const, self.dtype)

    def add(self, other: "Affine", sign: int = 1) -> "Affine":
        out = self.copy()
        for k, (a, c) in other.terms.items():
            cur = out.terms.get(k)
            if cur is None:
                out.terms[k] = [a, sign * c]
            else:
                cur[1] += sign * c
                if cur[1] == 0:
                    del out.terms[k]
        out.const += sign * other.const
        out.dtype = dt.promote(self.dtype, other.dtype)
        return out

    def scale(self, s: int) -> "Affine":
        if s == 0:
            return Affine({}, 0, self.dtype)
        return Affine({k: [a, c * s] for k, (a, c) in self.terms.items()}, self.const * s, self.dtype)

    def is_const(self) -> bool:
        return not self.terms

    def bound(self, dom) -> tuple:
        lo = hi = self.const
        for a, c in self.terms.values():
            alo, ahi = const_bound(a, dom)
            if c > 0:
                lo, hi = lo + c * alo if alo != -INF else -INF, hi + c * ahi if ahi != INF else INF
            else:
                lo, hi = lo + c * ahi if ahi != INF else -INF, hi + c * alo if alo != -INF else INF
        return lo, hi

    def to_expr(self) -> PrimExpr:
        items = sorted(self.terms.values(), key=lambda ac: -abs(ac[1]))
        d = self.dtype
        out = None
        for a, c in items:
            if out is None:
                out = a if c == 1 else binary("*", a, const(c, d)) if c != -1 else binary(
                    "-", const(0, d), a)
            elif c > 0:
                out = binary("+", out, a if c == 1 else binary("*", a, const(c, d)))
            else:
                out = binary("-", out, a if c == -1 else binary("*", a, const(-c, d)))
        if out is None:
            return const(self.const, d)
        if self.const > 0:
            out = binary("+", out, const(self.const, d))
        elif self.const < 0:
            out = binary("-", out, const(-self.const, d))
        return out


def merge_divmod(aff: Affine) -> Affine:
    """Rewrite k*c*(x // c) + k*(x % c) as k*x wherever both terms appear."""
    mods = [(k, a, c) for k, (a, c) in aff.terms.items()
            if isinstance(a, Binary) and a.op == "%" and isinstance(a.b, IntImm)]
    for key, atom, coef in mods:
        div_key = ("//", atom_key(atom.a), atom.b.value)
        div = aff.terms.get(div_key)
        if div is None or div[1] != coef * atom.b.value or key not in aff.terms:
            continue
        rest = Affine({k: v for k, v in aff.terms.items() if k not in (key, div_key)}, aff.const,
                      aff.dtype)
        aff = rest.add(Simplifier().affine(atom.a).scale(coef))
    return aff


class Simplifier:
    """Simplifies expressions given variable ranges `dom` ({Var: (lo, hi)} inclusive)."""

    def __init__(self, dom: dict | None = None):
        self.dom = dom or {}

    # ------------------------------------------------------------------ entry
    def __call__(self, e: PrimExpr) -> PrimExpr:
        if isinstance(e, (Var, IntImm)):
            return e
        if dt.is_int(e.dtype) and dt.lanes(e.dtype) == 1:
            return merge_divmod(self.affine(e)).to_expr()
        if dt.is_bool(e.dtype) and dt.lanes(e.dtype) == 1:
            return self.cond(e)
        return self.other(e)

    def bound(self, e: PrimExpr) -> tuple:
        return self.affine(e).bound(self.dom)

    def can_prove(self, cond: PrimExpr) -> bool:
        c = self.cond(cond)
        return isinstance(c, IntImm) and bool(c.value)

    # ------------------------------------------------------------------ integers
    def affine(self, e: PrimExpr) -> Affine:
        if isinstance(e, IntImm):
            return Affine({}, e.value, e.dtype)
        if isinstance(e, Var):
            return Affine.atom(e)
        if isinstance(e, Binary):
            op = e.op
            if op == "+":
                return self.affine(e.a).add(self.affine(e.b))
            if op == "-":
                return self.affine(e.a).add(self.affine(e.b), -1)
            if op == "*":
                a, b = self.affine(e.a), self.affine(e.b)
                if b.is_const():
                    return a.scale(b.const)
                if a.is_const():
                    return b.scale(a.const)
                return Affine.atom(binary("*", a.to_expr(), b.to_expr()))
            if op in ("//", "%") and isinstance(e.b, IntImm) and e.b.value > 0:
                a = self.affine(e.a)
                return self.floordiv(a, e.b.value) if op == "//" else self.floormod(a, e.b.value)
            if op in ("min", "max"):
                return self.minmax(op, self.affine(e.a), self.affine(e.b))
            return Affine.atom(binary(op, self(e.a), self(e.b)))
        return Affine.atom(self.other(e))

    def floordiv(self, x: Affine, c: int) -> Affine:
        if c == 1:
            return x
        q = Affine({}, x.const // c, x.dtype)
        r = Affine({}, x.const % c, x.dtype)
        for k, (a, coef) in x.terms.items():
            if coef % c == 0:
                q.terms[k] = [a, coef // c]
            else:
                r.terms[k] = [a, coef]
        if not r.terms:
            return q
        lo, hi = r.bound(self.dom)
        if lo != -INF and hi != INF and lo // c == hi // c:
            q.const += lo // c
            return q
        g = c
        for _, coef in r.terms.values():
            g = gcd(g, coef)
        if g > 1:
            inner = Affine({k: [a, coef // g] for k, (a, coef) in r.terms.items()}, r.const // g,
                           r.dtype)
            return q.add(self.floordiv(inner, c // g))
        split = self._split(r, c)
        if split is not None:
            high, a = split
            return q.add(self.floordiv(high, c // a))
        if len(r.terms) == 1 and r.const == 0:
            (atom, coef), = r.terms.values()
            if coef == 1 and isinstance(atom, Binary) and atom.op == "//" and isinstance(atom.b, IntImm):
                return q.add(Affine.atom(binary("//", atom.a, const(atom.b.value * c, x.dtype))))
        return q.add(Affine.atom(binary("//", r.to_expr(), const(c, x.dtype))))

    def floormod(self, x: Affine, c: int) -> Affine:
        if c == 1:
            return Affine({}, 0, x.dtype)
        r = Affine({}, x.const % c, x.dtype)
        for k, (a, coef) in x.terms.items():
            if coef % c:
                r.terms[k] = [a, coef]
        if not r.terms:
            return r
        lo, hi = r.bound(self.dom)
        if lo != -INF and hi != INF and lo // c == hi // c:
            r.const -= c * (lo // c)
            return r
        g = c
        for _, coef in r.terms.values():
            g = gcd(g, coef)
        if g > 1:
            inner = Affine({k: [a, coef // g] for k, (a, coef) in r.terms.items()}, r.const // g,
                           r.dtype)
            return self.floormod(inner, c // g).scale(g).add(Affine({}, r.const % g, r.dtype))
        split = self._split(r, c)
        if split is not None:
            high, a = split
            low = r.add(high.scale(a), -1)
            return self.floormod(high, c // a).scale(a).add(low)
        if len(r.terms) == 1 and r.const == 0:
            (atom, coef), = r.terms.values()
            if (coef == 1 and isinstance(atom, Binary) and atom.op == "%"
                    and isinstance(atom.b, IntImm) and atom.b.value % c == 0):
                return self.floormod(self.affine(atom.a), c)
        return Affine.atom(binary("%", r.to_expr(), const(c, x.dtype)))

    def _split(self, r: Affine, c: int):
        """Find high terms with coefficients divisible by a (a | c) and the rest in [0, a)."""
        items = sorted(r.terms.items(), key=lambda kv: -abs(kv[1][1]))
        for m in range(1, len(items)):
            a = 0
            for _, (_, coef) in items[:m]:
                a = gcd(a, coef)
            if a <= 1 or c % a:
                continue
            low = Affine(dict(items[m:]), r.const, r.dtype)
            lo, hi = low.bound(self.dom)
            if lo >= 0 and hi < a:
                high = Affine({k: [at, coef // a] for k, (at, coef) in items[:m]}, 0, r.dtype)
                return high, a
        return None

    def minmax(self, op: str, a: Affine, b: Affine) -> Affine:
        diff = a.add(b, -1)
        lo, hi = diff.bound(self.dom)
        if hi <= 0:
            return a if op == "min" else b
        if lo >= 0:
            return b if op == "min" else a
        return Affine.atom(binary(op, a.to_expr(), b.to_expr()))

    # ------------------------------------------------------------------ conditions
    def cond(self, e: PrimExpr) -> PrimExpr:
        if isinstance(e, IntImm):
            return e
        if isinstance(e, Binary):
            if e.op in ("and", "or"):
                return binary(e.op, self.cond(e.a), self.cond(e.b))
            if e.op in _CMP and dt.is_int(e.a.dtype) and dt.lanes(e.a.dtype) == 1:
                return self.compare(e.op, merge_divmod(self.affine(e.a).add(self.affine(e.b), -1)))
            if e.op in _CMP:
                return binary(e.op, self(e.a), self(e.b))
        if isinstance(e, Not):
            c = self.cond(e.a)
            if isinstance(c, IntImm):
                return const(not c.value)
            return Not(c)
        return self.other(e)

    def compare(self, op: str, d: Affine) -> PrimExpr:
        """Simplify `d op 0` for an affine difference d."""
        lo, hi = d.bound(self.dom)
        if op == "<":
            op, d, lo, hi = "<=", d.add(Affine({}, 1)), lo + 1, hi + 1
        elif op == ">":
            op, d, lo, hi = ">=", d.add(Affine({}, -1)), lo - 1, hi - 1
        truth = {"<=": (hi <= 0, lo > 0), ">=": (lo >= 0, hi < 0),
                 "==": (lo == hi == 0, lo > 0 or hi < 0), "!=": (lo > 0 or hi < 0, lo == hi == 0)}
        yes, no = truth[op]
        if yes:
            return const(True)
        if no:
            return const(False)
        k = d.const
        lhs = Affine(d.terms, 0, d.dtype)
        g = 0
        for _, coef in lhs.terms.values():
            g = gcd(g, coef)
        if g > 1:  # g*x <= -k  <=>  x <= floor(-k/g);  g*x >= -k  <=>  x >= ceil(-k/g)
            lhs = Affine({kk: [a, coef // g] for kk, (a, coef) in lhs.terms.items()}, 0, d.dtype)
            if op == "<=":
                return binary("<", lhs.to_expr(), const((-k) // g + 1, d.dtype))
            if op == ">=":
                return binary(">=", lhs.to_expr(), const(-((k) // g), d.dtype))
            if k % g:
                return const(op == "!=")
            k //= g
        if op == "<=":
            return binary("<", lhs.to_expr(), const(-k + 1, d.dtype))
        return binary(op, lhs.to_expr(), const(-k, d.dtype))

    # ------------------------------------------------------------------ everything else
    def other(self, e: PrimExpr) -> PrimExpr:
        if isinstance(e, Binary):
            return binary(e.op, self(e.a), self(e.b))
        if isinstance(e, BufferLoad):
            idx = tuple(self(i) for i in e.indices)
            if all(a is b for a, b in zip(idx, e.indices)):
                return e
            return BufferLoad(e.buffer, idx, e.dtype)
        if isinstance(e, Cast):
            from ..expr import cast
            return cast(self(e.value), e.dtype)
        if isinstance(e, Select):
            from ..expr import select
            c = self.cond(e.cond)
            return select(c, self(e.true_value), self(e.false_value))
        if isinstance(e, Call):
            args = tuple(self(a) for a in e.args)
            return Call(e.op, args, e.dtype)
        if isinstance(e, Not):
            return self.cond(e)
        return e


def simplify(e: PrimExpr, dom: dict | None = None) -> PrimExpr:
    return Simplifier(dom)(e)
