"""The schedule primitives, one module per family; importing registers their instructions."""
from . import (annotate, cache, compute_at, get, inline, layout, loop, reduction,  # noqa: F401
               sampling, tensorize)
