"""Mutators: change one decision of a design-space point (tile sizes, unroll depth, parallel
extent, compute location, prefetch distance). `Mutator.create("tile-size")`; register your own with
`@Mutator.registry.register("name")`."""
from .base import Mutator
from .compute_location import MutateComputeLocation
from .parallel import MutateParallel
from .prefetch import MutatePrefetch
from .thread_binding import MutateThreadBinding
from .tile_size import MutateTileSize
from .unroll import MutateUnroll

__all__ = ["MutateComputeLocation", "MutateParallel", "MutatePrefetch", "MutateThreadBinding",
           "MutateTileSize", "MutateUnroll", "Mutator"]
