"""MutateTileSize: move a prime factor of one tile size to another level of the same loop, or
(for sample_tile) pick another innermost factor, which may not divide the extent."""
from __future__ import annotations

from math import prod

from ...schedule.primitives.sampling import (check_partitioned_tile, prime_factors,
                                             sample_partitioned_tile, tile_caps)
from .base import Mutator


@Mutator.registry.register("tile-size")
class MutateTileSize(Mutator):
    """Changes one tile-size decision (sample_perfect_tile or sample_tile) so that the product
    still fits the loop; `new_inner_prob`: how often a sample_tile gets a fresh innermost factor
    instead of a moved prime."""

    tag = "tile"

    def __init__(self, new_inner_prob: float = 0.3):
        self.new_inner_prob = new_inner_prob

    def apply(self, point, rand):
        positions = self.positions(point)
        rand.shuffle(positions)
        for pos in positions:
            inst = point.space.insts[pos]
            old = tuple(point.decisions[pos])
            n, max_inner = inst.attrs[:2]
            caps = tile_caps(inst.attrs)
            if n < 2:
                continue
            extent = point.info[pos]
            partitioned = inst.kind.name == "SampleTile"
            if partitioned and rand.random() < self.new_inner_prob:
                new = sample_partitioned_tile(rand, extent, n, max_inner)
                if new != old:
                    return pos, new
            new = _move_factor(rand, list(old), n - 1 if partitioned else n, max_inner, caps)
            if new is None or new == old:
                continue
            if partitioned and not check_partitioned_tile(new, extent, n):
                continue
            if not partitioned and prod(new) != extent:
                continue
            return pos, new
        return None


def _move_factor(rand, factors: list, movable: int, max_inner: int, caps=None):
    """Divide one of the first `movable` factors by one of its primes and multiply another by
    it, keeping the innermost at most max_inner (with per-level `caps`: each within its
    own)."""
    sources = [i for i in range(movable) if factors[i] > 1]
    if not sources or movable < 2:
        return None
    src = rand.choice(sources)
    dst = rand.choice([i for i in range(movable) if i != src])
    p = rand.choice(prime_factors(factors[src]))
    factors[src] //= p
    factors[dst] *= p
    if caps is not None:
        if caps[dst] is not None and factors[dst] > caps[dst]:
            return None
    elif dst == len(factors) - 1 and factors[dst] > max_inner:
        return None
    return tuple(factors)
