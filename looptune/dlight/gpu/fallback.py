"""gpu-fallback: any function. Each stage (after inlining) gets its leading spatial loops
fused and split over blockIdx.x / threadIdx.x, a thread per output element; reduction loops
stay serial in each thread, accumulating in a register (pooling, short reductions over many
rows; convolutions have gpu-conv). A stage whose loops cannot be fused runs in one thread."""
from __future__ import annotations

from ..base import Rule
from .common import bind_rest, prepare


@Rule.registry.register("gpu-fallback")
class Fallback(Rule):
    """Applies to every function."""

    def apply(self, func_or_sch, target):
        return bind_rest(prepare(func_or_sch), target)
