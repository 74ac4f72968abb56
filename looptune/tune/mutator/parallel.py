"""MutateParallel: another parallel extent (jobs per core) for the root's parallel loop."""
from __future__ import annotations

from .base import MutateChoice, Mutator


@Mutator.registry.register("parallel")
class MutateParallel(MutateChoice):
    """Changes the sampled parallel extent of ParallelizeVectorizeUnroll."""

    tag = "parallel"
