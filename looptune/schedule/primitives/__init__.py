"""The schedule primitives, one module per family; importing registers their instructions."""
from . import annotate, cache, compute_at, get, inline, loop, reduction, sampling  # noqa: F401
