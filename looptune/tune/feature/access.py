"""Index analysis for the per-store features: how each enclosing loop moves a buffer index.

An index is evaluated with every loop variable at 0, and with one variable at a time at 1 and
at extent-1. That gives each loop's stride and the span it covers in every buffer dimension
(floordiv/mod of fused loops included) at the cost of one pass over the expression; the
footprint of a buffer inside each loop level follows (spans summed per dimension, capped by
the shape).
"""
from __future__ import annotations

from ...tir import dtype as dt
from ...tir.expr import Binary, Cast, FloatImm, IntImm, Select, Var

_FOLD = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "//": lambda a, b: a // b if b else 0, "%": lambda a, b: a % b if b else 0,
    "tdiv": lambda a, b: int(a / b) if b else 0,
    "tmod": lambda a, b: a - b * int(a / b) if b else 0,
    "/": lambda a, b: a / b if b else 0, "min": min, "max": max,
    "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b), "<": lambda a, b: int(a < b),
    "<=": lambda a, b: int(a <= b), ">": lambda a, b: int(a > b), ">=": lambda a, b: int(a >= b),
    "and": lambda a, b: int(bool(a) and bool(b)), "or": lambda a, b: int(bool(a) or bool(b)),
}


def _points(e, env: dict, memo: dict):
    """(value with every loop var 0, {var: (value at var=1, value at var=extent-1)}) for the
    loop vars that e depends on; vars outside `env` count as 0. `memo` maps id(e) -> result
    while every var keeps its binding."""
    t = type(e)
    if t is Binary:
        r = memo.get(id(e))
        if r is not None:
            return r
        a, b = e.a, e.b
        t = type(a)  # leaves inline: they are half of all nodes
        if t is IntImm:
            a0, da = a.value, None
        elif t is Var:
            p = env.get(a)
            a0, da = 0, (None if p is None else {a: p})
        else:
            a0, da = _points(a, env, memo)
        t = type(b)
        if t is IntImm:
            b0, db = b.value, None
        elif t is Var:
            p = env.get(b)
            b0, db = 0, (None if p is None else {b: p})
        else:
            b0, db = _points(b, env, memo)
        f = _FOLD[e.op]
        if da is None:
            r = (f(a0, b0), None if db is None else
                 {v: (f(a0, y1), f(a0, ye)) for v, (y1, ye) in db.items()})
        elif db is None:
            r = f(a0, b0), {v: (f(x1, b0), f(xe, b0)) for v, (x1, xe) in da.items()}
        else:
            d = {}
            for v in da.keys() | db.keys():
                x1, xe = da.get(v, (a0, a0))
                y1, ye = db.get(v, (b0, b0))
                d[v] = (f(x1, y1), f(xe, ye))
            r = f(a0, b0), d
        memo[id(e)] = r
        return r
    if t is IntImm or t is FloatImm:
        return e.value, None
    if t is Var:
        p = env.get(e)
        return (0, None) if p is None else (0, {e: p})
    if t is Cast:
        return _points(e.value, env, memo)
    if t is Select:
        c0, dc = _points(e.cond, env, memo)
        t0, dtv = _points(e.true_value, env, memo)
        f0, df = _points(e.false_value, env, memo)
        d = {}
        for v in set().union(*(x for x in (dc, dtv, df) if x)):
            c1, ce = dc.get(v, (c0, c0)) if dc else (c0, c0)
            x1, xe = dtv.get(v, (t0, t0)) if dtv else (t0, t0)
            y1, ye = df.get(v, (f0, f0)) if df else (f0, f0)
            d[v] = (x1 if c1 else y1, xe if ce else ye)
        return (t0 if c0 else f0), d or None
    return 0, None  # loads and calls inside indices: treated as constant


class Access:
    """One buffer as seen by one store: how each loop moves its index, and its footprints."""
    __slots__ = ("buffer", "read", "write", "eb", "dep", "stride", "fp", "local", "run", "key")

    def __init__(self, buffer, indices, loops, pos, env, memo):
        self.buffer = buffer
        self.read = self.write = False
        self.eb = dt.nbytes(buffer.dtype)
        self.local = buffer.scope == "local"
        n, shape = len(loops), buffer.shape
        lstrides = buffer.layout_strides()
        dep = [False] * n
        stride = [0] * n
        touched = [[] for _ in range(n)]
        self.key = key = [_points(idx, env, memo) for idx in indices]
        for d, (base, deltas) in enumerate(key):
            if not deltas:
                continue
            for v, (v1, ve) in deltas.items():
                i = pos[v]
                step, span = v1 - base, abs(ve - base)
                if step or span:
                    dep[i] = True
                    stride[i] += step * lstrides[d]
                    touched[i].append((d, max(span, abs(step))))
        ext = [1] * len(shape)
        fp = [1] * (n + 1)   # fp[i]: distinct elements touched by loops i..n-1
        size = 1
        for i in range(n - 1, -1, -1):
            if touched[i]:
                for d, span in touched[i]:
                    ext[d] += span
                size = 1
                for d, e in enumerate(ext):
                    size *= e if e < shape[d] else shape[d]
            fp[i] = size
        self.dep, self.stride, self.fp = dep, stride, fp
        self.run = min(ext[-1], shape[-1]) if shape else 1  # contiguous elements (last dim)
