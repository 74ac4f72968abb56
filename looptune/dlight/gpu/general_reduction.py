"""gpu-general-reduction: reductions and elementwise stages over the same rows (softmax,
layer_norm, a mean and a variance, logsumexp), the whole row in one thread block:

    for row in blockIdx.x:
      for t in threadIdx.x(T): for o: max[row] = max(max[row], X[row, o * T + t])  (across threads)
      for t in threadIdx.x(T): for o: sum[row] += exp(X[row, o * T + t] - max[row])
      for o: for t in threadIdx.x(T): Y[row, o * T + t] = exp(X[..] - max[row]) / sum[row]

The last stage's row loops go to blockIdx.x and its other loops are spread over threadIdx.x;
every earlier stage is computed at the row (compute_at) and spread over the same T threads
(the rows' length rounded up to a power of two, at most 256), reductions across threads. A
row is read from global memory once per stage; the per-row intermediates (max, sum) live in
shared memory, as GPU lowering places them."""
from __future__ import annotations

from math import prod

from ...schedule import ScheduleError
from ...tune.schedule_rule.analysis import loop_kinds
from ..base import Rule, block_names
from .common import (THREADS, bind_rest, bind_threads, bind_unit, extents, fuse, is_reduction,
                     max_threads, prepare, reduce_threads, reduces_along_rows, split_kinds,
                     streaming, volume)


@Rule.registry.register("gpu-general-reduction")
class GeneralReduction(Rule):
    """gpu-general-reduction (module docstring); applies where every reduction runs over the
    same rows and the rows are long enough to share a thread block, else returns None for the
    fallback."""

    def apply(self, func_or_sch, target):
        sch = prepare(func_or_sch)
        names = block_names(sch)
        reds = [n for n in names if is_reduction(sch.get(sch.get_block(n)))]
        if not reds or len(names) < 2:
            return None
        shape, length = None, 0
        for n in reds:
            b = sch.get_block(n)
            if not streaming(sch.get(b)):
                return None
            spatial, reduce = split_kinds(sch, b)
            if shape is None:
                shape, length = extents(sch, spatial), volume(sch, reduce)
            elif extents(sch, spatial) != shape or volume(sch, reduce) != length:
                return None
        if not (length >= target.warp_size or length > prod(shape)):
            return None  # short rows, many of them: a thread per row (the fallback)
        if prod(shape) >= THREADS and not all(
                reduces_along_rows(sch.get(sch.get_block(n))) for n in reds):
            return None  # many columns: a thread each reads along rows (the fallback)
        last = sch.get_block(names[-1])
        loops = sch.get_loops(last)
        if extents(sch, loops[:len(shape)]) != shape:
            return None
        threads = reduce_threads(length, max_threads(target))
        if shape:
            row = fuse(sch, loops[:len(shape)])
        else:
            row = sch.add_unit_loop(loops[0] if loops else last)
        sch.bind(row, "blockIdx.x")
        spread(sch, last, row, threads)
        for n in reversed(names[:-1]):
            b = sch.get_block(n)
            sch.compute_at(b, row)
            spread(sch, b, row, threads)
        return bind_rest(sch, target)


def spread(sch, block, row, threads: int) -> None:
    """The loops of `block` inside `row` fused and spread over `threads` threads (a reduction
    across them); one thread where there are none."""
    var = sch.get(row).loop_var
    nest = [lp.loop_var for lp in sch.enclosing_loops(block)]
    depth = nest.index(var) + 1
    inner = sch.get_loops(block)[depth:]
    kinds = loop_kinds(sch, block)[depth:]
    if not inner:
        bind_unit(sch, block, "threadIdx.x")
        return
    reduction = is_reduction(sch.get(block))
    if len(set(kinds)) != 1 or kinds[0] == "O" or (kinds[0] == "R") != reduction:
        raise ScheduleError(f"block {sch.get(block).name}: computed at the row, its loops are "
                            f"{''.join(kinds)}, not one row's work")
    bind_threads(sch, fuse(sch, inner), threads, reduction=reduction)
