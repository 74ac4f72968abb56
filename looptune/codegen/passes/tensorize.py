"""Loops marked by Schedule.tensorize become the call of their tensor intrinsic.

Runs first in stage 2, on loops and multi-dimensional stores with compacted buffers: each
marked nest is matched against the intrinsic's description again (the schedule may have
changed it since, and compaction moves the accumulator tile) and replaced by
`Evaluate(Call(lt_intrin_<name>, (first element of each operand..., run-time strides...)))`,
which the C renderer prints as a call of the intrinsic's C with those elements' addresses.
Compiled code only: the interpreter runs the loops."""
from __future__ import annotations

from ...error import BuildError
from ...tir.expr import Call, const
from ...tir.functor import map_children, visit
from ...tir.intrin import TENSORIZE, get_intrin, match_nest
from ...tir.intrin.base import IntrinMismatch, intrin_of_op
from ...tir.stmt import Evaluate, For, IfThenElse
from .common import inside


def tensorize_loops(body):
    """`body` with every nest marked TENSORIZE replaced by its intrinsic's call."""
    def walk(s, dom):
        if isinstance(s, For) and s.annotation(TENSORIZE) is not None:
            intrin = get_intrin(s.annotation(TENSORIZE))
            try:
                m = match_nest(s, intrin, dom)
            except IntrinMismatch as e:
                raise BuildError(f"loop {s.loop_var.name} was tensorized with {intrin.name} "
                                 f"but no longer matches it after scheduling: {e}") from None
            args = tuple(m.operands) + tuple(const(x, "int64") for x in m.strides)
            call = Evaluate(Call(intrin.op, args, "int32"))
            return call if m.guard is None else IfThenElse(m.guard, call)
        inner = inside(dom, s) if isinstance(s, For) else dom
        return map_children(s, lambda x: walk(x, inner))
    return walk(body, {})


def intrinsics_used(body) -> list:
    """The TensorIntrins whose calls `body` (lowered) holds, in order of first use."""
    found: dict = {}

    def fn(n):
        if isinstance(n, Call):
            intrin = intrin_of_op(n.op)
            if intrin is not None:
                found.setdefault(intrin.name, intrin)
    visit(body, fn)
    return list(found.values())
