"""The schedule primitives, one module per family; importing registers their instructions."""
from . import annotate, get, loop, sampling  # noqa: F401
