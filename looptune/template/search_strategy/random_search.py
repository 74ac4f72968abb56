"""Random search: configs drawn uniformly at random, without repeats."""
from __future__ import annotations

from ...tune.search_strategy.base import SearchStrategy
from .base import TemplateSearch


@SearchStrategy.registry.register("template-random")
class RandomSearch(TemplateSearch):
    def next_batch(self, n: int) -> list:
        return self.random_unvisited(n)
