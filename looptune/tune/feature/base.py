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
        return cls.registry.create(spec, FeatureExtractor, **kwargs)

    def names(self) -> list:
        raise NotImplementedError

    def extract(self, candidates, *, target=None) -> list:
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}(version={self.version}, width={self.width})"


def lowered_of(x):
    """The stage-1 lowered PrimFunc of a MeasureCandidate, a Schedule, or a PrimFunc (lowered
    here with `codegen.lower_loops` if it still holds blocks)."""
    lowered = getattr(x, "lowered", None)
    if lowered is not None:
        return lowered() if callable(lowered) else lowered
    from ...tir.func import PrimFunc
    from ...tir.stmt import BlockRealize
    if isinstance(x, PrimFunc):
        if isinstance(x.body, BlockRealize):
            from ...codegen.lower import lower_loops
            return lower_loops(x)
        return x
    raise TypeError(f"cannot extract features from {type(x).__name__}; pass a MeasureCandidate, "
                    "a Schedule or a PrimFunc")


def empty(width: int) -> np.ndarray:
    return np.zeros((0, width), dtype=np.float32)
