"""The CUDA rules of looptune.dlight, one file each (their order is base.DEFAULT_RULES)."""
from . import conv, elementwise, fallback, general_reduction, matmul, reduction  # noqa: F401
from .conv import Conv
from .elementwise import Elementwise
from .fallback import Fallback
from .general_reduction import GeneralReduction
from .matmul import Matmul
from .reduction import Reduction

__all__ = ["Conv", "Elementwise", "Fallback", "GeneralReduction", "Matmul", "Reduction"]
