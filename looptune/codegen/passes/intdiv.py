"""Integer division for C: floordiv/floormod become C's truncating / and % where the
numerator is provably non-negative (the common case for indices); the rest keep floor
semantics through helper functions in the generated code."""
from __future__ import annotations

from ...tir.arith import const_bound
from ...tir.expr import Binary, IntImm, binary
from ...tir.functor import transform
from .common import map_exprs


def lower_intdiv(stmt):
    def fn(e, dom):
        def rewrite(n):
            if (isinstance(n, Binary) and n.op in ("//", "%") and isinstance(n.b, IntImm)
                    and n.b.value > 0 and const_bound(n.a, dom)[0] >= 0):
                return binary("tdiv" if n.op == "//" else "tmod", n.a, n.b)
            return n
        return transform(e, rewrite)
    return map_exprs(stmt, fn)
