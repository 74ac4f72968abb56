"""MutateUnroll: another unroll depth for a block's auto-unroll annotation."""
from __future__ import annotations

from .base import MutateChoice, Mutator


@Mutator.registry.register("unroll")
class MutateUnroll(MutateChoice):
    """Changes the sampled unroll depth of ParallelizeVectorizeUnroll."""

    tag = "unroll"
