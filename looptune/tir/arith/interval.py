"""Constant interval bounds [lo, hi] of integer expressions over variable ranges.

`dom` maps Var -> (lo, hi) inclusive; unknown variables are unbounded. Infinite ends are
float('inf') / -float('inf').
"""
from __future__ import annotations

import math

from .. import dtype as dt
from ..expr import Binary, Call, Cast, FloatImm, IntImm, Select, Var

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
    if c == 0:
        return 0, 0  # numpy's x // 0 == 0
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


def div_interval(x, y, op: str):
    """x // y (op "//") or x % y ("%") over intervals, floor semantics; y may span 0, where
    both give 0 (numpy's integer division by zero)."""
    if INF in (abs(x[0]), abs(x[1]), abs(y[0]), abs(y[1])):
        return UNBOUNDED
    parts = [(0, 0)] if y[0] <= 0 <= y[1] else []
    for lo, hi in ((y[0], min(y[1], -1)), (max(y[0], 1), y[1])):
        if lo > hi:
            continue
        if op == "//":  # monotone in each argument where y keeps its sign: the corners
            q = [a // b for a in x for b in (lo, hi)]
            parts.append((min(q), max(q)))
        elif lo > 0:  # 0 <= x % y < y, and x % y == x for 0 <= x < y
            parts.append((0, min(hi - 1, x[1]) if x[0] >= 0 else hi - 1))
        else:
            parts.append((lo + 1, 0))
    return min(p[0] for p in parts), max(p[1] for p in parts)


def int_range(dtype: str) -> tuple:
    """The values of an integer dtype."""
    b = dt.bits(dtype)
    return (0, 2**b - 1) if dt.kind(dtype) == "uint" else (-2**(b - 1), 2**(b - 1) - 1)


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
        if op in ("//", "%") and not (isinstance(e.b, IntImm) and e.b.value > 0):
            return div_interval(const_bound(e.a, dom), const_bound(e.b, dom), op)
        if op in ("tdiv", "tmod") and not (isinstance(e.b, IntImm) and e.b.value != 0):
            a, b = const_bound(e.a, dom), const_bound(e.b, dom)
            m = max(abs(a[0]), abs(a[1]))  # |x tdiv y| <= |x|, |x tmod y| <= min(|x|, |y| - 1)
            if op == "tmod":
                m = min(m, max(abs(b[0]), abs(b[1]), 1) - 1)
            return -m, m
        if op in ("//", "%", "tdiv", "tmod"):
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
        if not dt.is_int(e.dtype):
            return UNBOUNDED
        full = int_range(e.dtype)
        if dt.is_float(e.value.dtype):  # truncates; out of range (or NaN) it is undefined
            lo, hi = float_bound(e.value, dom)
            lo, hi = math.trunc(lo) if lo != -INF else lo, math.trunc(hi) if hi != INF else hi
            return (lo, hi) if full[0] <= lo and hi <= full[1] else UNBOUNDED
        inner = const_bound(e.value, dom)
        return inner if full[0] <= inner[0] and inner[1] <= full[1] else full  # else it wraps
    if isinstance(e, Call) and e.op == "abs" and dt.is_int(e.dtype):
        lo, hi = const_bound(e.args[0], dom)
        return (0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), max(abs(lo), abs(hi))
    return UNBOUNDED


FLOAT_SLACK = 1e-5  # relative, per arithmetic step: more than float32 rounding can add


def float_bound(e, dom: dict) -> tuple:
    """Interval [lo, hi] of a float expression of integer variables (a coordinate computed
    in floats, as resize's), or UNBOUNDED. A finite answer also means the expression is
    never NaN: only finite constants, no division by an interval holding 0. Each +, -, *, /
    widens each end by FLOAT_SLACK of itself, so rounding cannot carry a value past it."""
    if isinstance(e, FloatImm):
        return (e.value, e.value) if math.isfinite(e.value) else UNBOUNDED
    if isinstance(e, Cast):
        if dt.is_float(e.value.dtype):
            return float_bound(e.value, dom)
        return const_bound(e.value, dom) if dt.is_int(e.value.dtype) else UNBOUNDED
    if isinstance(e, Select):
        a, b = float_bound(e.true_value, dom), float_bound(e.false_value, dom)
        return min(a[0], b[0]), max(a[1], b[1])
    if isinstance(e, Call) and e.op in ("floor", "ceil", "round") and len(e.args) == 1:
        lo, hi = float_bound(e.args[0], dom)
        if INF in (abs(lo), abs(hi)):
            return UNBOUNDED
        return (math.floor(lo), math.floor(hi)) if e.op == "floor" else (math.ceil(lo) - (
            e.op == "round"), math.ceil(hi))
    if not isinstance(e, Binary) or e.op not in ("+", "-", "*", "/", "min", "max"):
        return UNBOUNDED
    a, b = float_bound(e.a, dom), float_bound(e.b, dom)
    if INF in (abs(a[0]), abs(a[1]), abs(b[0]), abs(b[1])):
        return UNBOUNDED
    if e.op in ("min", "max"):
        f = min if e.op == "min" else max
        return f(a[0], b[0]), f(a[1], b[1])
    if e.op == "+":
        lo, hi = a[0] + b[0], a[1] + b[1]
    elif e.op == "-":
        lo, hi = a[0] - b[1], a[1] - b[0]
    else:
        if e.op == "/":
            if b[0] <= 0 <= b[1]:
                return UNBOUNDED
            b = (1 / b[1], 1 / b[0])
        lo, hi = mul_interval(a, b)
    return lo - FLOAT_SLACK * abs(lo), hi + FLOAT_SLACK * abs(hi)  # rounding is relative


def extents_to_dom(pairs) -> dict:
    """{var: extent} (or (var, extent) pairs) -> {var: (0, extent - 1)}."""
    items = pairs.items() if isinstance(pairs, dict) else pairs
    return {v: (0, n - 1) for v, n in items}
