"""Arithmetic on index expressions: simplification and bound analysis."""
from .bound import const_extent, eval_bound
from .interval import INF, const_bound, extents_to_dom
from .simplify import Affine, Simplifier, simplify

__all__ = ["Affine", "INF", "Simplifier", "const_bound", "const_extent", "eval_bound",
           "extents_to_dom", "simplify"]
