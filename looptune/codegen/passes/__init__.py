"""Lowering passes, applied in order by `codegen.lower`."""
from .flatten import flatten
from .intdiv import lower_intdiv
from .lower_blocks import lower_blocks
from .unroll import auto_unroll, unroll_explicit
from .vectorize import vectorize_loops

__all__ = ["auto_unroll", "flatten", "lower_blocks", "lower_intdiv", "unroll_explicit",
           "vectorize_loops"]
