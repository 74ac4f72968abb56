"""Grid search: every config in index order (the first knob varying fastest)."""
from __future__ import annotations

from ...tune.search_strategy.base import SearchStrategy
from .base import TemplateSearch


@SearchStrategy.registry.register("template-gridsearch")
class GridSearch(TemplateSearch):
    """AutoTVM's GridSearchTuner ("template-gridsearch"): every config in index order; the
    reference for a space small enough to measure whole."""

    def setup(self) -> None:
        self.counter = 0

    def next_batch(self, n: int) -> list:
        out = []
        while len(out) < n and self.counter < len(self.space):
            if self.counter not in self.visited:
                out.append(self.counter)
            self.counter += 1
        return out
