"""Hill climbing: measures the unmeasured neighbours of the current config (one knob step
away: ConfigSpace.neighbors) and moves to a better one as soon as a batch finds it; at a
local optimum it restarts from a random unmeasured config."""
from __future__ import annotations

import math

from ...tune.search_strategy.base import SearchStrategy
from .base import TemplateSearch


@SearchStrategy.registry.register("template-hill-climb")
class HillClimb(TemplateSearch):
    """Hill climbing over neighbouring configs ("template-hill-climb"), restarting from a random
    config at each local optimum."""

    def setup(self) -> None:
        self.current = None
        self.current_secs = math.inf
        self.restarts = 0

    def next_batch(self, n: int) -> list:
        start = []
        if self.current is None:
            start = self.random_unvisited(1)
            if not start:
                return []
            self.current, self.current_secs = start[0], math.inf
        near = [i for i in self.space.neighbors(self.current) if i not in self.visited]
        self.rand.shuffle(near)
        batch = start + near[:n - len(start)]
        if not batch:  # a local optimum: every neighbour measured, none better
            self.current = None
            self.restarts += 1
            return self.next_batch(n)
        return batch

    def update(self, inputs, results) -> None:
        best = min(zip(inputs, results), key=lambda ir: ir[1].secs)
        if best[1].secs < self.current_secs:
            self.current, self.current_secs = best[0].config.index, best[1].secs
