"""Lowering passes and the C-family renderers."""
from .cstyle import CRenderer, CStyleRenderer, render_c
from .lower import finish_lowering, lower, lower_loops

__all__ = ["CRenderer", "CStyleRenderer", "finish_lowering", "lower",
           "lower_loops", "render_c"]
