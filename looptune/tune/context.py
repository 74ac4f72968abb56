"""TuneContext: one task - a workload, a target, and the parts that tune it."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..target import Target
from ..tir.analysis import flop_count
from ..tir.func import PrimFunc
from .search_strategy.base import SearchStrategy
from .space_generator.base import SpaceGenerator


@dataclass(eq=False)
class TuneContext:
    """One task to tune: a workload, its target, and the space generator and search strategy
    (names or instances) that tune it, initialized with this context. `seed` None draws one;
    `flops` None counts them."""

    func: PrimFunc
    target: Target = field(default_factory=lambda: Target.create("cpu"))
    space_generator: SpaceGenerator | str = "post-order-apply"
    search_strategy: SearchStrategy | str = "evolutionary"
    task_name: str | None = None
    seed: int | None = None
    flops: float | None = None
    deadline: float | None = None  # time.time() at which the run's time budget ends

    def __post_init__(self):
        self.target = Target.create(self.target)
        self.task_name = self.task_name or self.func.name
        if self.seed is None:
            self.seed = random.SystemRandom().randrange(1 << 31)
        if self.flops is None:
            self.flops = flop_count(self.func)
        self.space_generator = SpaceGenerator.create(self.space_generator)
        self.search_strategy = SearchStrategy.create(self.search_strategy)
        self.space_generator.initialize_with_tune_context(self)
        self.search_strategy.initialize_with_tune_context(self)

    @property
    def postprocs(self) -> list:
        return self.space_generator.postprocs

    def generate_design_space(self) -> list:
        return self.space_generator.generate_design_space(self.func, self.seed)
