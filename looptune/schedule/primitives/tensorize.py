"""tensorize: compute a loop nest with a hardware unit (a registered tensor intrinsic).

tensorize(L, "x86_dot_u8s8_16x4") checks that the nest from loop L down computes what the
intrinsic's description does (tir/intrin: same extents, same expression, each operand laid
out as the unit reads it) and marks L with it. The nest stays in the IR, so the interpreter,
verification and the cost model read the plain loops; lowering replaces it by the
intrinsic's call (codegen/passes/tensorize.py), and the backend refuses an intrinsic whose
unit its Target lacks. A schedule that later changes the nest (a split inside it) fails
there with a BuildError naming the loop.
"""
from __future__ import annotations

from ...tir.functor import collect_realizes, uses_var
from ...tir.intrin import TENSORIZE, get_intrin, match_nest
from ...tir.intrin.base import IntrinMismatch
from ...tir.stmt import For, with_annotation
from ..error import ScheduleError
from .common import loop_dom
from ..trace import instruction


@instruction("Tensorize", "tensorize", inputs=("loop",), attrs=("intrin",))
def tensorize(sch, inputs, attrs, decision):
    name = attrs[0]
    entry = sch._loop(inputs[0])
    loop = entry.node
    what = f"tensorize {loop.loop_var.name} with {name}"
    try:
        intrin = get_intrin(name)
    except KeyError as e:
        raise ScheduleError(f"{what}: {e.args[0]}") from None
    if loop.annotation(TENSORIZE) is not None:
        raise ScheduleError(f"{what}: the loop is tensorized already "
                            f"({loop.annotation(TENSORIZE)})")
    for p in entry.parents:
        if isinstance(p, For) and p.annotation(TENSORIZE) is not None:
            raise ScheduleError(f"{what}: it is inside loop {p.loop_var.name}, tensorized "
                                f"with {p.annotation(TENSORIZE)} already")
    try:
        m = match_nest(loop, intrin, loop_dom(entry.parents))
    except IntrinMismatch as e:
        raise ScheduleError(f"{what}: {e}") from None
    for lp in m.loops:
        if lp.kind in ("parallel", "thread_binding"):
            raise ScheduleError(f"{what}: loop {lp.loop_var.name} inside it is {lp.kind}; "
                                "the unit computes the nest on one thread")
    (realize,) = collect_realizes(loop)
    block = realize.block
    if block.init is not None:
        # lowering puts the init before the block's outermost reduction loop: it must be
        # outside the nest, or the unit would reset the accumulator on every step
        outer = {p.loop_var for p in entry.parents if isinstance(p, For)}
        reductions = [v for iv, v in zip(block.iter_vars, realize.iter_values) if iv.kind == "R"]
        if not any(uses_var(v, outer) for v in reductions):
            raise ScheduleError(f"{what}: block {block.name}'s init would run inside the nest; "
                                "keep a reduction loop outside it or decompose_reduction first")
    new = For(loop.loop_var, loop.extent, loop.kind, loop.body, loop.thread,
              with_annotation(loop.annotations, TENSORIZE, intrin.name))
    sch.state.replace({loop: new})
    return []
