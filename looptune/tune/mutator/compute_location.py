"""MutateComputeLocation: compute a producer at another loop its consumers share, where it
is, or inlined. Illegal picks are refused when the point replays (compute_at says so), and
the search tries another mutation."""
from __future__ import annotations

from .base import Mutator, other_index


@Mutator.registry.register("compute-location")
class MutateComputeLocation(Mutator):
    tag = "compute_location"

    def apply(self, point, rand):
        positions = self.positions(point)
        if not positions:
            return None
        pos = rand.choice(positions)
        new = other_index(rand, point.info[pos], point.decisions[pos], low=-2)
        return None if new is None else (pos, new)
