"""Tensor expressions: say what to compute; `create_prim_func` makes it a loop nest."""
from .create import create_prim_func
from .intrin import (abs, all, any, astype, ceil, cos, erf, exp, floor, fmod, if_then_else, log, max,
                     max_value, min, min_value, pow, prod, round, rsqrt, sigmoid, sin, sqrt,
                     sum, tanh)
from .stage import Stage, TESchedule, create_schedule
from .tensor import ComputeOp, PlaceholderOp, TEError, Tensor, compute, placeholder, reduce_axis
from ..tir.expr import const
from ..tir.expr import Var as var

__all__ = [
    "ComputeOp", "PlaceholderOp", "Stage", "TEError", "TESchedule", "Tensor", "abs", "all",
    "any", "astype", "ceil", "compute", "const", "cos", "create_prim_func", "create_schedule",
    "erf", "exp", "floor", "fmod", "if_then_else", "log", "max", "max_value", "min", "min_value",
    "placeholder", "pow", "prod", "reduce_axis", "round", "rsqrt", "sigmoid", "sin", "sqrt",
    "sum", "tanh", "var",
]

# last: the operator library imports looptune.te itself, which is complete by now
from . import ops  # noqa: E402, F401
