"""Lowering passes and the C-family renderers."""
from .cstyle import CRenderer, CStyleRenderer, c_comment, render_c
from .lower import finish_lowering, lower, lower_loops

__all__ = ["CRenderer", "CStyleRenderer", "c_comment", "finish_lowering", "lower",
           "lower_loops", "render_c"]
