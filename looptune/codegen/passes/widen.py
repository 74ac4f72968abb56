"""64-bit index arithmetic where 32 bits could overflow (C's signed overflow is undefined:
a 3e9-iteration loop with an int32 counter never ended, `i * 50000` wrapped to a wrong
address). A loop of 2**31 or more iterations counts with an int64 variable; an integer
expression of loop variables (a flattened offset, a vector's base, a guard) any part of which
can leave int32's range over the loop ranges is computed in int64. What provably fits stays
int32, so ordinary kernels (and their vectorization) are unchanged."""
from __future__ import annotations

from dataclasses import replace

from ...tir import dtype as dt
from ...tir.arith.interval import const_bound
from ...tir.expr import Binary, IntImm, Ramp, Var, cast, const
from ...tir.functor import map_children, transform, uses_var
from ...tir.stmt import BufferStore, Evaluate, For, IfThenElse

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1
_INDEX_OPS = ("+", "-", "*", "//", "%", "tdiv", "tmod", "min", "max")


def widen_indices(stmt):
    """`stmt` with 64-bit loop counters and index arithmetic wherever int32 could overflow."""
    vmap: dict = {}  # loop var -> its int64 replacement

    def walk(s, dom):
        if isinstance(s, For):
            inner = dict(dom)
            inner[s.loop_var] = (0, s.extent - 1)
            var = s.loop_var
            if s.extent - 1 > INT32_MAX and dt.bits(var.dtype) < 64:
                var = vmap[s.loop_var] = Var(var.name, "int64")
            s = map_children(s, lambda x: walk(x, inner))
            return s if var is s.loop_var else replace(s, loop_var=var)
        if isinstance(s, IfThenElse):
            return IfThenElse(expr(s.cond, dom), walk(s.then_case, dom),
                              None if s.else_case is None else walk(s.else_case, dom))
        if isinstance(s, BufferStore):
            return BufferStore(s.buffer, expr(s.value, dom),
                               tuple(expr(i, dom) for i in s.indices))
        if isinstance(s, Evaluate):
            return Evaluate(expr(s.value, dom))
        return map_children(s, lambda x: walk(x, dom))

    def expr(e, dom):
        def pre(n):
            if isinstance(n, Ramp):  # its lanes reach base + (lanes - 1) * stride
                lo, hi = const_bound(n.base, dom)
                span = n.stride * (n.lanes - 1)
                wide = _is_index(n.base) and not _fits((lo + min(0, span), hi + max(0, span)))
                return Ramp(widen(n.base) if wide else expr(n.base, dom), n.stride, n.lanes,
                            n.dtype)
            if _is_index(n):
                return widen(n) if _overflows(n, dom) or (vmap and uses_var(n, vmap)) else n
            return None
        return transform(e, lambda n: n, pre=pre)

    def widen(e):
        def pre(n):
            if isinstance(n, Var):
                if n in vmap:
                    return vmap[n]
                return n if dt.bits(n.dtype) >= 64 else cast(n, "int64")
            if isinstance(n, IntImm):
                return const(n.value, "int64")
            return None
        return transform(e, lambda n: n, pre=pre)

    return walk(stmt, {})


def _is_index(e) -> bool:
    """An integer scalar built of loop variables, constants and integer arithmetic only."""
    if isinstance(e, (Var, IntImm)):
        return dt.is_int(e.dtype) and dt.lanes(e.dtype) == 1
    return (isinstance(e, Binary) and e.op in _INDEX_OPS and dt.is_int(e.dtype)
            and dt.lanes(e.dtype) == 1 and _is_index(e.a) and _is_index(e.b))


def _fits(bound) -> bool:
    return INT32_MIN <= bound[0] and bound[1] <= INT32_MAX


def _overflows(e, dom) -> bool:
    """Can `e`, or any part of it, leave int32's range? (False for 64-bit expressions.)"""
    if dt.bits(e.dtype) >= 64:
        return False
    if not _fits(const_bound(e, dom)):
        return True
    return isinstance(e, Binary) and (_overflows(e.a, dom) or _overflows(e.b, dom))
