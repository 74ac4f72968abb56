"""MutateComputeLocation: compute a producer at another loop its consumers share (decisions
0..n-1), where it is (-1), or inlined (-2). Illegal picks are refused when the point replays
(compute_at says so), and the search tries another mutation."""
from __future__ import annotations

from .base import MutateChoice, Mutator


@Mutator.registry.register("compute-location")
class MutateComputeLocation(MutateChoice):
    """Changes a sample_compute_location decision (from RandomComputeLocation): another loop,
    where it is (-1) or inlined (-2)."""

    tag = "compute_location"
    low = -2
