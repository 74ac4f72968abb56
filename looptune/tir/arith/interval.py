"""Constant interval bounds [lo, hi] of integer expressions over variable ranges.

`dom` maps Var -> (lo, hi) inclusive; unknown variables are unbounded. Infinite ends are
float('inf') / -float('inf').
"""
from __future__ import annotations

from ..expr import Binary, Cast, IntImm, Select, Var

INF = float("inf")
UNBOUNDED = (-INF, INF)


def _mul(a, b):
    """Product of two interval ends where 0 * inf = 0."""
    if a == 0 or b == 0:
        return 0
    return a * b


def mul_interval(x, y):
    c = (_mul(x[0], y[0]), _mul(x[0], y[1]), _mul(x[1], y[0]), _mul(x[1], y[1]))
    return min(c), max(c)


def floordiv_interval(x, c: int):
    if c > 0:
        lo = x[0] // c if x[0] != -INF else -INF
        hi = x[1] // c if x[1] != INF else INF
        return lo, hi
    return UNBOUNDED


def floormod_interval(x, c: int):
    if c > 0:
        if x[0] != -INF and x[1] != INF and x[0] // c == x[1] // c:
            return x[0] % c, x[1] % c
        return 0, c - 1
    return UNBOUNDED


def const_bound(e, dom: dict) -> tuple:
    """Interval [lo, hi] containing every value of integer expression `e` over `dom`."""
    if isinstance(e, Var):
        return dom.get(e, UNBOUNDED)
    if isinstance(e, IntImm):
        return e.value, e.value
    if isinstance(e, Binary):
        op = e.op
        if op in ("+", "-", "*", "min", "max"):
            a, b = const_bound(e.a, dom), const_bound(e.b, dom)
            if op == "+":
                return a[0] + b[0], a[1] + b[1]
            if op == "-":
                return a[0] - b[1], a[1] - b[0]
            if op == "*":
                return mul_interval(a, b)
            if op == "min":
                return min(a[0], b[0]), min(a[1], b[1])
            return max(a[0], b[0]), max(a[1], b[1])
        if op in ("//", "%", "tdiv", "tmod") and isinstance(e.b, IntImm):
            a = const_bound(e.a, dom)
            c = e.b.value
            if op in ("//", "tdiv"):
                if op == "tdiv" and a[0] < 0:
                    return UNBOUNDED
                return floordiv_interval(a, c)
            if op == "tmod" and a[0] < 0:
                return (-(abs(c) - 1), abs(c) - 1)
            return floormod_interval(a, c)
        if op in ("==", "!=", "<", "<=", ">", ">=", "and", "or"):
            return 0, 1
        return UNBOUNDED
    if isinstance(e, Select):
        a, b = const_bound(e.true_value, dom), const_bound(e.false_value, dom)
        return min(a[0], b[0]), max(a[1], b[1])
    if isinstance(e, Cast):
        return const_bound(e.value, dom) if e.dtype.startswith("int") else UNBOUNDED
    return UNBOUNDED


def extents_to_dom(pairs) -> dict:
    """{var: extent} (or (var, extent) pairs) -> {var: (0, extent - 1)}."""
    items = pairs.items() if isinstance(pairs, dict) else pairs
    return {v: (0, n - 1) for v, n in items}
