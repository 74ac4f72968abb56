"""Simulated annealing: a walk over measured configs. Each batch steps from the current
config to unmeasured configs one or two knob steps away (ConfigSpace.neighbors); a step to a
config whose log run time is worse by d is taken with probability exp(-d / T), and T cools
by `cooling` per batch. A walk with nothing new around it jumps to a random config."""
from __future__ import annotations

import math

from ...tune.search_strategy.base import SearchStrategy
from .base import TemplateSearch


@SearchStrategy.registry.register("template-sa")
class SimulatedAnnealing(TemplateSearch):
    """Simulated annealing over measured configs ("template-sa"): `temp` is the starting
    temperature, `cooling` its factor per batch."""

    def __init__(self, *, temp: float = 0.5, cooling: float = 0.9,
                 early_stopping: int | None = None):
        super().__init__(early_stopping=early_stopping)
        self.start_temp = temp
        self.cooling = cooling

    def setup(self) -> None:
        self.temp = self.start_temp
        self.current = None          # config index
        self.energy = math.inf       # its log seconds

    def next_batch(self, n: int) -> list:
        if self.current is None:
            return self.random_unvisited(n)
        out: list = []
        for _ in range(8 * n):
            if len(out) >= n:
                break
            i = self.current
            for _ in range(self.rand.choice((1, 1, 2))):
                near = self.space.neighbors(i)
                if not near:
                    break
                i = self.rand.choice(near)
            if i not in self.visited and i not in out:
                out.append(i)
        if not out:  # nothing new around: jump
            self.current, self.energy = None, math.inf
            return self.random_unvisited(n)
        return out

    def update(self, inputs, results) -> None:
        for inp, res in zip(inputs, results):
            e = math.log(res.secs) if math.isfinite(res.secs) else math.inf
            if e < self.energy or (math.isfinite(e) and self.temp > 0 and
                                   self.rand.random() < math.exp(-(e - self.energy) / self.temp)):
                self.current, self.energy = inp.config.index, e
        self.temp *= self.cooling
