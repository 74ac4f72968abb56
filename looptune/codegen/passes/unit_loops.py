"""Loops of one iteration dropped before rendering: their body stays, their variable becomes
0. Schedules leave many (splits of factor 1, a batch of one); each one's variable otherwise
appears in every index of the body (`n_1 * 28672 + n_2 * 28672 + ...`), which makes the C
longer for the compiler to read and fold."""
from __future__ import annotations

from ...tir.expr import const
from ...tir.functor import substitute, transform
from ...tir.stmt import For

DROPPED_KINDS = ("serial", "unrolled", "vectorized")


def drop_unit_loops(stmt):
    """`stmt` without its loops of one iteration. The variable becomes 0 in that loop's body
    only: partitioning copies loop nests, so one variable can be a one-iteration loop in a
    tail and a longer loop elsewhere."""
    def fn(n):
        if isinstance(n, For) and n.extent == 1 and n.kind in DROPPED_KINDS:
            return substitute(n.body, {n.loop_var: const(0, n.loop_var.dtype)})
        return n
    return transform(stmt, fn)
