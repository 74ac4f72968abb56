"""Program features: fixed-width float32 rows describing a candidate's lowered loop IR, the
input of the learned cost models (see per_store.py for the columns)."""
from __future__ import annotations

from .base import FeatureExtractor
from .per_store import (ACCESS_SLOTS, FEATURE_VERSION, FEATURE_WIDTH, PerStoreFeature,
                        feature_docs, feature_names, store_features)


_SHARED: dict = {}


def extract(candidates, target=None, *, extractor="per-store") -> list:
    """One (n_stores, FEATURE_WIDTH) float32 array per candidate (a MeasureCandidate,
    Schedule, or PrimFunc), read-only. `target` (default: this machine) supplies the cache
    sizes; `extractor` is a FeatureExtractor or a registered name (one shared instance)."""
    if isinstance(extractor, str):
        extractor = _SHARED.get(extractor) or _SHARED.setdefault(
            extractor, FeatureExtractor.create(extractor))
    return extractor.extract(candidates, target=target)


__all__ = ["ACCESS_SLOTS", "FEATURE_VERSION", "FEATURE_WIDTH", "FeatureExtractor",
           "PerStoreFeature", "extract", "feature_docs", "feature_names", "store_features"]
