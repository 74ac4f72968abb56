"""Tensor intrinsics: a loop nest a hardware unit computes in one step (its description)
paired with the C that computes it there (its implementation). `Schedule.tensorize` checks
that a loop nest matches a description; lowering (codegen/passes/tensorize.py) replaces it."""
from . import x86  # noqa: F401  (registers the x86 intrinsics)
from .base import (INTRIN_OP, TENSORIZE, TensorIntrin, get_intrin, intrin_names, match_nest,
                   NestMatch)

__all__ = ["INTRIN_OP", "TENSORIZE", "NestMatch", "TensorIntrin", "get_intrin", "intrin_names",
           "match_nest"]
