"""GridSearchTuner: every config in index order (the first knob varying fastest)."""
from __future__ import annotations

from .base import Tuner


@Tuner.registry.register("gridsearch")
class GridSearchTuner(Tuner):
    def __init__(self, task, *, seed: int | None = None):
        super().__init__(task, seed=seed)
        self.counter = 0

    def next_batch(self, n: int) -> list:
        out = []
        while len(out) < n and self.counter < len(self.space):
            if self.counter not in self.visited:
                out.append(self.counter)
            self.counter += 1
        return out
