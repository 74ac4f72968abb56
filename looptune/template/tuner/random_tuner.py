"""RandomTuner: configs drawn uniformly at random, without repeats."""
from __future__ import annotations

from .base import Tuner


@Tuner.registry.register("random")
class RandomTuner(Tuner):
    def next_batch(self, n: int) -> list:
        return self.random_unvisited(n)
