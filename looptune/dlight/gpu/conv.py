"""gpu-conv: one reduction with data reuse that reads an input through a window (a
convolution: conv2d, conv1d, depthwise and grouped forms whose output is indexed by plain
loop variables), with an elementwise epilogue.

    for the block's tile of outputs in blockIdx.x:        (n, k / Tk, y / Ty, x / Tx)
      for threads in threadIdx.x:                         (tk, ty, tx): a pixel each
        for ko: the step's window of the input and its weights into shared memory,
                fetched cooperatively by all the block's threads
          for ki, the window loops: for kv: acc[kv] += X_shared[..] * W_shared[..]
        out[..] = epilogue(acc[kv])                        each thread's vk outputs

The axis that some input does not use (output channels: every output channel reads the same
input pixels) is the register axis: a thread computes `per_thread` of them from each input
value it loads. Threads go to the innermost spatial axes first (x, then y: consecutive
threads read consecutive pixels), then to the register axis, up to 256 a block; each count
divides its extent, so no tile is guarded. The outermost reduction loop (input channels) is
split in steps of at most 8, over which the input's window and the weights are staged in
shared memory; the window loops (kernel rows and columns) run inside each step."""
from __future__ import annotations

from math import prod

from ...tir.expr import IntImm, Var
from ...tir.functor import uses_var
from ...tune.schedule_rule.analysis import has_reuse, is_elementwise, loop_kinds
from ..base import Rule, block_names, extent, start, try_
from .common import (accumulate_in_registers, bind_rest, fuse, is_reduction, max_threads,
                     stage_in_shared)


@Rule.registry.register("gpu-conv")
class Conv(Rule):
    """per_thread: outputs a thread accumulates along the register axis; k_step: the most
    input channels (the outermost reduction loop) staged in shared memory per step."""

    def __init__(self, *, per_thread: int = 4, k_step: int = 8):
        self.per_thread, self.k_step = per_thread, k_step

    def apply(self, func_or_sch, target):
        sch = start(func_or_sch)
        reds = [n for n in block_names(sch) if is_reduction(sch.get(sch.get_block(n)))]
        if len(reds) != 1:
            return None
        b = sch.get_block(reds[0])
        # the stages feeding the convolution (its padding) are computed into its shared
        # tiles; the others are inlined (into those stages, or into the epilogue)
        feeding = {sch.get(p).name for p in sch.get_producers(b)}
        for name in block_names(sch):
            if name not in feeding and is_elementwise(sch.get(sch.get_block(name))):
                try_(sch.compute_inline, sch.get_block(name))
        b = sch.get_block(reds[0])
        blk = sch.get(b)
        if not has_reuse(blk) or not _plain_output(blk) or not (
                _window(blk) or any(_window(sch.get(p)) for p in sch.get_producers(b))):
            return None
        kinds = loop_kinds(sch, b)
        if "O" in kinds or "R" not in kinds or kinds.index("R") < kinds.count("S"):
            return None  # spatial loops first, then the reduction loops
        loops = sch.get_loops(b)
        spatial = [lp for lp, kd in zip(loops, kinds) if kd == "S"]
        reduce = [lp for lp, kd in zip(loops, kinds) if kd == "R"]
        reg = _register_axis(sch, b, spatial)
        sizes = _thread_sizes(sch, spatial, reg, max_threads(target), self.per_thread)
        sizes = _enough_blocks(sch, spatial, reg, sizes, target.cores)
        step, window = _step_loop(sch, b, reduce)
        # tiles: [block, thread, register] per spatial loop, [steps, step] for the outer
        # reduction loop, the other reduction loops inside the step
        blocks, threads, regs = [], [], []
        for lp, (t, v) in zip(spatial, sizes):
            o, ti, vi = sch.split(lp, [None, t, v])
            blocks.append(o)
            threads.append(ti)
            regs.append(vi)
        ko, ki = sch.split(step, [None, _largest_divisor(extent(sch, step), self.k_step)])
        sch.reorder(*blocks, *threads, ko, ki, *window, *regs)
        sch.bind(fuse(sch, blocks), "blockIdx.x")
        tx = fuse(sch, threads)
        sch.bind(tx, "threadIdx.x")
        n_threads = prod(t for t, _ in sizes)
        producers = {sch.get(p).writes[0].buffer: p for p in sch.get_producers(b)}
        for index, read in enumerate(blk.reads):
            cache = producers.get(read.buffer)
            if cache is not None:  # the padding, computed tile by tile into shared memory
                sch.set_scope(cache, 0, "shared")
            else:
                cache = sch.cache_read(b, index, "shared")
            stage_in_shared(sch, cache, ko, n_threads)
        sch = accumulate_in_registers(sch, b, tx, ko, regs)
        return bind_rest(sch, target)


def _window(block) -> bool:
    """Does some read index a dimension by a sum of iteration variables (y + r: a window)?"""
    return any(not isinstance(mn, (IntImm, Var)) for r in block.reads for mn, _ in r.region)


def _plain_output(block) -> bool:
    ivs = {id(iv.var) for iv in block.iter_vars}
    return all(isinstance(mn, Var) and id(mn) in ivs and ext == 1
               for w in block.writes for mn, ext in w.region)


def _step_loop(sch, b, reduce) -> tuple:
    """(the reduction loop to stage in steps, the others): the longest one that no read
    indexes through a window (input channels), the others being the window's (kernel rows
    and columns)."""
    blk = sch.get(b)
    values = sch.realize(b).iter_values
    windowed = set()
    for r in blk.reads:
        for mn, _ in r.region:
            if not isinstance(mn, (IntImm, Var)):
                windowed |= {id(iv.var) for iv in blk.iter_vars if uses_var(mn, {iv.var})}

    def plain(lp):
        v = sch.get(lp).loop_var
        return not any(id(iv.var) in windowed for iv, val in zip(blk.iter_vars, values)
                       if val is v)
    step = max(reduce, key=lambda lp: (plain(lp), extent(sch, lp)))
    return step, [lp for lp in reduce if lp is not step]


def _register_axis(sch, b, spatial):
    """The spatial loop whose variable the reads that do not use it are largest (so the
    values of those reads serve every output along it: output channels, for a convolution's
    input); None where every read uses every spatial variable."""
    blk = sch.get(b)
    values = sch.realize(b).iter_values
    var_of = {}
    for lp in spatial:
        v = sch.get(lp).loop_var
        for iv, val in zip(blk.iter_vars, values):
            if val is v:
                var_of[lp] = iv.var
    best, best_n = None, 0
    for lp in spatial:
        var = var_of.get(lp)
        if var is None or extent(sch, lp) < 2:
            continue
        n = sum(prod(r.buffer.shape) for r in blk.reads
                if not any(uses_var(mn, {var}) for mn, _ in r.region))
        if n > best_n:
            best, best_n = lp, n
    return best


def _largest_divisor(n: int, most: int) -> int:
    return max(d for d in range(1, max(1, min(n, most)) + 1) if n % d == 0)


def _thread_sizes(sch, spatial, reg, cap: int, per_thread: int) -> list:
    """(threads, outputs per thread) per spatial loop: threads to the innermost loops first
    (up to 16 on the innermost, the rest of 64 on the next), then to the register axis,
    within `cap` threads a block; `per_thread` outputs along the register axis."""
    sizes = {lp: [1, 1] for lp in spatial}
    left = cap
    inner = [lp for lp in reversed(spatial) if lp is not reg]
    for lp, most in zip(inner, (16, 64)):
        t = _largest_divisor(extent(sch, lp), min(most // (cap // left), left))
        sizes[lp][0] = t
        left //= t
    if reg is not None:
        n = extent(sch, reg)
        v = _largest_divisor(n, per_thread)
        sizes[reg] = [_largest_divisor(n // v, min(16, left)), v]
        left //= sizes[reg][0]
    for lp in inner[2:]:  # what is left to the outer axes (a batch)
        sizes[lp][0] = _largest_divisor(extent(sch, lp), left)
        left //= sizes[lp][0]
    return [tuple(sizes[lp]) for lp in spatial]


def _enough_blocks(sch, spatial, reg, sizes, sms: int) -> list:
    """Smaller tiles while there are fewer thread blocks than multiprocessors: first fewer
    outputs per thread, then fewer threads on the axis with the most (down to a warp)."""
    sizes = [list(x) for x in sizes]
    n = [extent(sch, lp) for lp in spatial]

    def blocks():
        return prod(e // (t * v) for e, (t, v) in zip(n, sizes))

    while blocks() < sms:
        i = spatial.index(reg) if reg is not None else None
        if i is not None and sizes[i][1] > 1:
            sizes[i][1] = _largest_divisor(n[i] // sizes[i][0], sizes[i][1] // 2)
            continue
        j = max(range(len(sizes)), key=lambda k: sizes[k][0])
        if sizes[j][0] == 1 or prod(t for t, _ in sizes) // sizes[j][0] * \
                _largest_divisor(n[j], sizes[j][0] // 2) < 32:
            break
        sizes[j][0] = _largest_divisor(n[j], sizes[j][0] // 2)
    return [tuple(x) for x in sizes]
