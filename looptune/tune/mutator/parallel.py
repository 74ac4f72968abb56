"""MutateParallel: another parallel extent (jobs per core) for the root's parallel loop."""
from __future__ import annotations

from .base import Mutator, other_index


@Mutator.registry.register("parallel")
class MutateParallel(Mutator):
    tag = "parallel"

    def apply(self, point, rand):
        positions = self.positions(point)
        if not positions:
            return None
        pos = rand.choice(positions)
        new = other_index(rand, point.info[pos], point.decisions[pos])
        return None if new is None else (pos, new)
