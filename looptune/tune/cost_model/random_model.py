"""RandomModel: seeded random scores, the baseline a learned model must beat (and what the
search uses when it is asked not to learn)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .base import CostModel


@CostModel.registry.register("random")
class RandomModel(CostModel):
    """Seeded random scores: learns nothing, so the search it drives is a random search with the
    same machinery."""

    def __init__(self, *, seed: int = 0, target=None, extractor="per-store"):
        """`seed` (default 0) drives the scores; its generator state is what save() keeps."""
        super().__init__(target=target, extractor=extractor)
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def update(self, candidates, results) -> None:
        # nothing to learn, so no features are extracted; only the count is kept
        self.num_trained += sum(1 for r in results if not r.aborted_early)

    def warm_start(self, database, target=None, *, exclude=None, max_records: int = 2000):
        return 0

    def predict(self, candidates) -> np.ndarray:
        return self.rng.random(len(candidates))

    def _params(self) -> dict:
        return {"seed": self.seed}

    def _state(self, path: Path) -> dict:
        return {"bit_generator": self.rng.bit_generator.state}

    def _load_state(self, state: dict, path: Path) -> None:
        self.rng.bit_generator.state = state["bit_generator"]
