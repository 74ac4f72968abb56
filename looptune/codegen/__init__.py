"""Lowering passes and the C-family renderers: CPU C + OpenMP (c.py), CUDA C (cuda.py), both
on the dialect-neutral base in cstyle.py."""
from .c import CRenderer, render_c
from .cstyle import CStyleRenderer, c_comment, c_string
from .cuda import CUDARenderer, render_cuda
from .lower import finish_lowering, lower, lower_loops

__all__ = ["CRenderer", "CStyleRenderer", "CUDARenderer", "c_comment", "c_string", "finish_lowering",
           "lower", "lower_loops", "render_c", "render_cuda"]
