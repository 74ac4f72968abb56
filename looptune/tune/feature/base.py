"""FeatureExtractor: turns tuning candidates into fixed-width float32 matrices (one row per
statement) that cost models learn from."""
from __future__ import annotations

import numpy as np

from ..registry import Registry


class FeatureExtractor:
    """`extract(candidates, target=...)` returns one (rows, width) float32 array per
    candidate; `width`, `names()` and `version` describe the columns, so a saved cost model
    can refuse features of another layout."""

    registry = Registry("feature extractor")
    version: int = 0
    width: int = 0

    @classmethod
    def create(cls, spec="per-store", **kwargs) -> "FeatureExtractor":
        """An extractor from its registered name ("per-store"), class or instance."""
        return cls.registry.create(spec, FeatureExtractor, **kwargs)

    def names(self) -> list:
        """The `width` column names, in order (what a person reads in a feature dump)."""
        raise NotImplementedError

    def extract(self, candidates, *, target=None) -> list:
        """One (rows, width) float32 array per candidate (a MeasureCandidate, Schedule or
        PrimFunc: see `lowered_of`), for `target` (default: this machine)."""
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}(version={self.version}, width={self.width})"


def lowered_of(x, target):
    """The stage-1 lowered PrimFunc, for `target`, of a MeasureCandidate, a Schedule, or a
    PrimFunc (lowered here by the target's Backend if it still holds blocks)."""
    from ...backend import Backend
    from ...schedule import Schedule
    from ...tir.func import PrimFunc
    from ...tir.stmt import BlockRealize
    if isinstance(x, Schedule) or (isinstance(x, PrimFunc) and isinstance(x.body, BlockRealize)):
        return Backend.for_target(target).lower_loops(x)
    if isinstance(x, PrimFunc):
        return x
    lowered = getattr(x, "lowered", None)
    if callable(lowered):
        return lowered(target)
    raise TypeError(f"cannot extract features from {type(x).__name__}; pass a MeasureCandidate, "
                    "a Schedule or a PrimFunc")


def empty(width: int) -> np.ndarray:
    return np.zeros((0, width), dtype=np.float32)
