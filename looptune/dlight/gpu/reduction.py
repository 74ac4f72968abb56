"""gpu-reduction: a single streaming reduction (row sum / max / mean, a matrix times a vector)
that is long (a warp or more) or longer than its number of rows, with any elementwise
consumers over the same rows. (A reduction over a strided axis with many outputs, a column
sum, is left to the fallback: a thread per column reads rows coalesced.)

    for row in blockIdx.x:  for r in threadIdx.y:          (rows_per_block rows, when short)
      for t in threadIdx.x(T): for o: Y[row] += X[row, o * T + t]

A thread block per row, or rows_per_block rows along threadIdx.y when a row needs fewer than
`min_threads` threads; T the reduction length rounded up to a power of two, at most 256.
GPU lowering turns the reduction bound to threadIdx.x into per-thread partials combined
by warp shuffles where it can (codegen/gpu/warp.py). A consumer over the same rows joins the
row's thread block (thread 0 of each row computes it)."""
from __future__ import annotations

from ...schedule import ScheduleError
from ..base import Rule, block_names, extent
from .common import (THREADS, attempt, bind_rest, bind_threads, bind_unit, fuse, is_reduction,
                     max_threads, prepare, reduce_threads, reduces_along_rows, split_kinds,
                     streaming, volume)


@Rule.registry.register("gpu-reduction")
class Reduction(Rule):
    """min_threads: threads a block should have at least; rows shorter than that are
    packed several to a block (along threadIdx.y, a divisor of the row count)."""

    def __init__(self, *, min_threads: int = 64):
        self.min_threads = min_threads

    def apply(self, func_or_sch, target):
        sch = prepare(func_or_sch)
        names = block_names(sch)
        reds = [n for n in names if is_reduction(sch.get(sch.get_block(n)))]
        if len(reds) != 1 or not streaming(sch.get(sch.get_block(reds[0]))):
            return None
        b = sch.get_block(reds[0])
        spatial, reduce = split_kinds(sch, b)
        rows, length = volume(sch, spatial), volume(sch, reduce)
        if not (length >= target.warp_size or length > rows):
            return None  # short rows, many of them: a thread per row (the fallback)
        if rows >= THREADS and not reduces_along_rows(sch.get(b)):
            return None  # many columns: a thread each reads along rows (the fallback)
        for n in names[names.index(reds[0]) + 1:]:  # consumers over the same rows only
            c = sch.get_block(n)
            if volume(sch, sch.get_loops(c)) != rows:
                return None
        threads = reduce_threads(length, max_threads(target))
        per_block = rows_per_block(rows, threads, self.min_threads)
        if spatial:
            row = fuse(sch, spatial)
            if per_block > 1:
                bx, ty = sch.split(row, [None, per_block])
                sch.bind(ty, "threadIdx.y")
            else:
                bx = row
            sch.bind(bx, "blockIdx.x")
        else:
            bx = bind_unit(sch, sch.get_loops(b)[0], "blockIdx.x")
        bind_threads(sch, fuse(sch, reduce), threads, reduction=True)
        for n in names[names.index(reds[0]) + 1:]:
            sch = attempt(sch, join_row, sch.get_block(n), bx, per_block)
        return bind_rest(sch, target)


def rows_per_block(rows: int, threads: int, min_threads: int) -> int:
    """The largest divisor of `rows` that brings a block to about min_threads threads."""
    want = max(1, min_threads // threads)
    return max(d for d in range(1, min(want, rows) + 1) if rows % d == 0)


def join_row(sch, block, bx, per_block: int) -> None:
    """Compute an elementwise consumer of the rows in the rows' thread block: its rows on
    threadIdx.y as the reduction's, one thread of threadIdx.x each (ScheduleError where it
    cannot: it stays a kernel of its own)."""
    sch.reverse_compute_at(block, bx)
    loops = sch.get_loops(block)
    rest = loops[len(loops) - _depth_under(sch, block, bx):]
    if per_block > 1:
        if not rest or extent(sch, fuse(sch, rest)) != per_block:
            raise ScheduleError("the consumer's rows do not line up with the reduction's")
        sch.bind(sch.get_loops(block)[-1], "threadIdx.y")
    elif rest:
        raise ScheduleError("the consumer has more than one element per row")
    bind_unit(sch, block, "threadIdx.x")


def _depth_under(sch, block, loop) -> int:
    """How many loops of `block` are inside `loop`."""
    var = sch.get(loop).loop_var
    loops = [lp.loop_var for lp in sch.enclosing_loops(block)]
    return len(loops) - loops.index(var) - 1
