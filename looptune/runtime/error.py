"""The build and run errors (defined in looptune.error, where every layer reaches them)."""
from ..error import BuildError, IndexRangeError, RunError

__all__ = ["BuildError", "IndexRangeError", "RunError"]
