"""Random search: configs drawn uniformly at random, without repeats."""
from __future__ import annotations

from ...tune.search_strategy.base import SearchStrategy
from .base import TemplateSearch


@SearchStrategy.registry.register("template-random")
class RandomSearch(TemplateSearch):
    """AutoTVM's RandomTuner ("template-random"): unmeasured configs uniformly at random; the
    baseline a guided tuner must beat."""

    def next_batch(self, n: int) -> list:
        return self.random_unvisited(n)
