"""MutateThreadBinding: another thread count for a GPU stage - a categorical sample (from
AutoBind or CrossThreadReduction) that a split turns into a loop bound to threadIdx."""
from __future__ import annotations

from .base import MutateChoice, Mutator


@Mutator.registry.register("thread-binding")
class MutateThreadBinding(MutateChoice):
    """Changes a categorical sample only where it is a split factor of a loop bound to threadIdx
    (`thread_count_sample`)."""

    tag = "categorical"

    def positions(self, point) -> list:
        insts = point.space.insts
        return [pos for pos in super().positions(point)
                if thread_count_sample(insts, pos)]


def thread_count_sample(insts, pos: int) -> bool:
    """Is the sampled value of insts[pos] a split factor whose loop is bound to threadIdx?"""
    out = insts[pos].outputs[0] if insts[pos].outputs else None
    if out is None:
        return False
    loops = set()
    for inst in insts[pos + 1:]:
        if inst.kind.name == "Split":
            loops.update(lp for lp, f in zip(inst.outputs, inst.inputs[1:]) if f is out)
        elif inst.kind.name == "Bind" and inst.inputs[0] in loops \
                and inst.attrs[0].startswith("threadIdx"):
            return True
    return False
