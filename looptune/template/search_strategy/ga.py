"""A genetic algorithm over the knobs. A genome is a config's per-knob value indices; each
generation breeds `pop_size` unmeasured children from the measured configs, parents picked
in proportion to their throughput (uniform crossover, then each knob mutated to a random
value with `mutation_prob`); the `elite_num` best always breed."""
from __future__ import annotations

import math

from ...tune.search_strategy.base import SearchStrategy
from .base import TemplateSearch


@SearchStrategy.registry.register("template-ga")
class GeneticSearch(TemplateSearch):
    """AutoTVM's GATuner as a search strategy ("template-ga"): generations of `pop_size` configs
    bred from the fittest measured ones."""

    def __init__(self, *, pop_size: int = 32, elite_num: int = 3, mutation_prob: float = 0.1,
                 early_stopping: int | None = None):
        super().__init__(early_stopping=early_stopping)
        self.params = dict(pop_size=pop_size, elite_num=elite_num)
        self.mutation_prob = mutation_prob

    def setup(self) -> None:
        self.pop_size = max(2, min(self.params["pop_size"], len(self.space)))
        self.elite_num = min(self.params["elite_num"], self.pop_size)
        self.fitness: dict = {}   # measured config index -> 1 / seconds (0: failed)
        self.pending: list = []   # this generation, not measured yet

    def next_batch(self, n: int) -> list:
        if not [i for i in self.pending if i not in self.visited]:
            self.pending = self.next_generation()
        self.pending = [i for i in self.pending if i not in self.visited]
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def update(self, inputs, results) -> None:
        for inp, res in zip(inputs, results):
            self.fitness[inp.config.index] = 0.0 if math.isinf(res.secs) else 1.0 / res.secs

    def next_generation(self) -> list:
        ranked = sorted(self.fitness.items(), key=lambda kv: -kv[1])[:self.pop_size]
        if not ranked or ranked[0][1] <= 0:
            return self.random_unvisited(self.pop_size)
        parents = [self.genes(i) for i, _ in ranked]
        top = ranked[0][1]
        weights = [f / top + 0.05 for _, f in ranked]
        children: list = []
        seen = set()
        for attempt in range(20 * self.pop_size):
            if len(children) >= self.pop_size:
                break
            a, b = self.rand.choices(parents, weights=weights, k=2)
            if attempt < min(self.elite_num, len(parents)):  # every elite breeds
                a = parents[attempt]
            child = [x if self.rand.random() < 0.5 else y for x, y in zip(a, b)]
            for k, size in enumerate(self.space.dims):
                if self.rand.random() < self.mutation_prob:
                    child[k] = self.rand.randrange(size)
            idx = self.space.index_of(child)
            if idx not in self.visited and idx not in seen:
                seen.add(idx)
                children.append(idx)
        return children + self.random_unvisited(self.pop_size - len(children), exclude=seen)

    def genes(self, index: int) -> list:
        return list(self.space.subindices(index).values())
