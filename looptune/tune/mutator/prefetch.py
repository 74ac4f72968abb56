"""MutatePrefetch: prefetch or not (another distance) for a tiled block's row tiles."""
from __future__ import annotations

from .base import MutateChoice, Mutator


@Mutator.registry.register("prefetch")
class MutatePrefetch(MutateChoice):
    """Changes the sampled prefetch distance of MultiLevelTiling (codegen/passes/prefetch.py)."""

    tag = "prefetch"
