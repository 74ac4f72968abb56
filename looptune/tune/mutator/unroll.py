"""MutateUnroll: another unroll depth for a block's auto-unroll annotation."""
from __future__ import annotations

from .base import Mutator, other_index


@Mutator.registry.register("unroll")
class MutateUnroll(Mutator):
    tag = "unroll"

    def apply(self, point, rand):
        positions = self.positions(point)
        if not positions:
            return None
        pos = rand.choice(positions)
        new = other_index(rand, point.info[pos], point.decisions[pos])
        return None if new is None else (pos, new)
