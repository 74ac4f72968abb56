"""gpu-elementwise: a function of spatial stages only (elementwise, broadcast, transpose,
padding): what can be inlined is, and each remaining stage's loops are fused and split over
blockIdx.x / threadIdx.x, 256 threads a block (the extent itself when smaller)."""
from __future__ import annotations

from ..base import Rule, block_names
from .common import bind_rest, is_reduction, prepare


@Rule.registry.register("gpu-elementwise")
class Elementwise(Rule):
    """gpu-elementwise (module docstring); does not apply to a function with a reduction."""

    def apply(self, func_or_sch, target):
        sch = prepare(func_or_sch)
        if any(is_reduction(sch.get(sch.get_block(n))) for n in block_names(sch)):
            return None
        return bind_rest(sch, target)
