"""Lowering passes, applied in order by `codegen.lower`."""
from .compact import accumulation_loops, compact_buffers
from .flatten import flatten
from .intdiv import lower_intdiv
from .lower_blocks import lower_blocks
from .partition import partition_loops
from .select_partition import partition_selects
from .unroll import auto_unroll, explicit, unroll_explicit
from .vectorize import vectorize_loops

__all__ = ["accumulation_loops", "auto_unroll", "compact_buffers", "explicit", "flatten",
           "lower_blocks", "lower_intdiv", "partition_loops", "partition_selects",
           "unroll_explicit", "vectorize_loops"]
