"""Lowering passes and the C-family renderers."""
from .cstyle import CRenderer, CStyleRenderer, render_c
from .lower import lower

__all__ = ["CRenderer", "CStyleRenderer", "lower", "render_c"]
