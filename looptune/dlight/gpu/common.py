"""What the GPU rules share: inlining, thread counts, binding a stage's spatial loops, and
the questions they ask about a block."""
from __future__ import annotations

from math import prod

from ...schedule import ScheduleError
from ...tir.functor import uses_var
from ...tir.stmt import For
from ...tune.schedule_rule.analysis import is_elementwise, loop_kinds
from ..base import block_names, extent, ok, start, try_

THREADS = 256  # threads per block of an elementwise stage, and most a reduction rule uses


def prepare(func_or_sch):
    """A schedule of the function with every elementwise stage that can be inlined inlined
    (conditions included: a padding becomes a select in its consumer)."""
    sch = start(func_or_sch)
    for name in block_names(sch):
        if is_elementwise(sch.get(sch.get_block(name))):
            try_(sch.compute_inline, sch.get_block(name))
    return sch


def pow2_ceil(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def max_threads(target) -> int:
    return min(THREADS, target.max_threads_per_block)


def thread_count(n: int, cap: int) -> int:
    """Threads for `n` independent pieces of work: n itself when it fits, else `cap`."""
    return max(1, min(n, cap))


def reduce_threads(n: int, cap: int) -> int:
    """Threads for a reduction of length n: n rounded up to a power of two (the tree that
    combines the partials halves), at most `cap`."""
    return max(1, min(pow2_ceil(n), cap))


def is_bound(sch, name: str) -> bool:
    return any(lp.kind == "thread_binding" for lp in sch.enclosing_loops(name))


def is_reduction(block) -> bool:
    return block.init is not None


def streaming(block) -> bool:
    """A reduction that reads some input once per point of its iteration domain (a row sum,
    softmax's max, a matrix-vector product's matrix): one of its reads uses every iteration
    variable (of extent > 1). A matmul or a convolution has none (each input is reused along
    some variable)."""
    return streamed_read(block) is not None


def streamed_read(block):
    """The read of a streaming reduction that uses every iteration variable, or None."""
    all_vars = [iv.var for iv in block.iter_vars if iv.extent > 1]
    for r in block.reads:
        used = {id(v) for v in all_vars for mn, _ in r.region if uses_var(mn, {v})}
        if len(used) == len(all_vars):
            return r
    return None


def reduces_along_rows(block) -> bool:
    """Does the streamed read's last (contiguous) index move with a reduction variable (a
    row sum), rather than only with spatial ones (a column sum)?"""
    r = streamed_read(block)
    red = {iv.var for iv in block.iter_vars if iv.kind == "R"}
    return r is not None and bool(r.region) and uses_var(r.region[-1][0], red)


def split_kinds(sch, block):
    """(spatial loops, reduction loops) of a block whose loops are only "S" and "R", spatial
    first (reordered if needed); ScheduleError for a loop that drives both."""
    loops, kinds = sch.get_loops(block), loop_kinds(sch, block)
    if "O" in kinds:
        raise ScheduleError(f"block {sch.get(block).name}: a loop drives both spatial and "
                            "reduction variables")
    spatial = [lp for lp, k in zip(loops, kinds) if k == "S"]
    reduce = [lp for lp, k in zip(loops, kinds) if k == "R"]
    if spatial and reduce and kinds.index("R") < len(spatial):
        sch.reorder(*spatial, *reduce)
    return spatial, reduce


def extents(sch, loops) -> list:
    return [extent(sch, lp) for lp in loops]


def fuse(sch, loops):
    return sch.fuse(*loops) if len(loops) > 1 else loops[0]


def bind_threads(sch, loop, threads: int, *, reduction: bool = False):
    """loop == o * threads + t, t bound to threadIdx.x (consecutive threads, consecutive
    iterations); a reduction's t goes outside o, so each thread keeps one partial."""
    o, t = sch.split(loop, [None, threads])
    if reduction:
        sch.reorder(t, o)
    sch.bind(t, "threadIdx.x")
    return o, t


def bind_unit(sch, block_or_loop, axis: str):
    """A loop of extent 1 around `block_or_loop`, bound to `axis` (one block / one thread)."""
    u = sch.add_unit_loop(block_or_loop)
    sch.bind(u, axis)
    return u


def bind_block(sch, block, target) -> None:
    """The fallback of one root stage: its leading spatial loops (spatial loops first where
    they can be moved there) fused and split over blockIdx.x / threadIdx.x; what is inside
    (a reduction) stays serial in each thread, accumulating in a register. A stage without
    spatial loops runs in one thread."""
    loops, kinds = sch.get_loops(block), loop_kinds(sch, block)
    if "R" in kinds and "O" not in kinds:
        spatial = [lp for lp, k in zip(loops, kinds) if k == "S"]
        if spatial and kinds.index("R") < len(spatial) and \
                ok(sch.reorder, *spatial, *[lp for lp, k in zip(loops, kinds) if k == "R"]):
            loops, kinds = sch.get_loops(block), loop_kinds(sch, block)
    lead = []
    for lp, k in zip(loops, kinds):
        if k != "S":
            break
        lead.append(lp)
        if not isinstance(sch.get(lp).body, For):
            break  # a loop holding more than the next loop: fuse no deeper
    if not lead:
        one_thread(sch, block)
        return
    fused = fuse(sch, lead)
    n = extent(sch, fused)
    bx, tx = sch.split(fused, [None, thread_count(n, max_threads(target))])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")


def accumulate_locally(sch, block) -> None:
    """A reduction bound a thread per output: each thread's sum in a register, written to
    global memory once, after its reduction loops."""
    if not is_reduction(sch.get(block)) or len(sch.get(block).writes) != 1:
        return
    loops = [lp for lp in sch.get_loops(block) if sch.get(lp).kind == "thread_binding"
             and sch.get(lp).thread == "threadIdx.x"]
    if loops:
        local = sch.cache_write(block, 0, "local")
        sch.reverse_compute_at(local, loops[-1])


def attempt(sch, steps, *args):
    """steps(copy, *args) on a copy of `sch`: the copy where every step applied, else `sch`
    as it was. Handles of `sch` stay valid in the copy."""
    trial = sch.copy()
    try:
        steps(trial, *args)
    except ScheduleError:
        return sch
    return trial


def bind_rest(sch, target):
    """`sch` with every root stage no rule bound bound as the fallback does (a stage whose
    loops cannot be fused runs in one thread)."""
    for name in block_names(sch):
        if not is_bound(sch, name):
            bound = attempt(sch, lambda s: bind_block(s, s.get_block(name), target))
            if bound is not sch:
                bound = attempt(bound, lambda s: accumulate_locally(s, s.get_block(name)))
            else:
                bound = attempt(sch, lambda s: one_thread(s, s.get_block(name)))
            sch = bound
    return sch


def one_thread(sch, block) -> None:
    """The whole stage in one thread of one block: unit loops around its nest, bound to
    blockIdx.x and threadIdx.x (always possible)."""
    loops = sch.get_loops(block)
    nest = loops[0] if loops else block
    bind_unit(sch, nest, "blockIdx.x")
    bind_unit(sch, nest, "threadIdx.x")


def volume(sch, loops) -> int:
    return prod(extents(sch, loops))


def stage_in_shared(sch, cache, loop, threads: int) -> None:
    """Compute the copy block `cache` (a shared-memory tile) once per iteration of `loop`,
    its loops fused and spread over the block's `threads` threads (the same threadIdx.x as
    the computation: loops with one thread tag share the hardware index)."""
    sch.compute_at(cache, loop)
    var = sch.get(loop).loop_var
    depth = [lp.loop_var for lp in sch.enclosing_loops(cache)].index(var) + 1
    copy = sch.get_loops(cache)[depth:]
    if copy:
        _, t = sch.split(fuse(sch, copy), [None, threads])
        sch.bind(t, "threadIdx.x")


def accumulate_in_registers(sch, block, thread_loop, step_loop, inner: list):
    """The block's results accumulated in a local (register) tile, initialised before
    `step_loop`, written back (through an elementwise epilogue where there is one) by each
    thread after it; `inner` (the register tile's loops) unrolled. Returns the schedule."""
    local = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(local, thread_loop)
    ok(sch.decompose_reduction, block, step_loop)
    for lp in inner:
        ok(sch.unroll, lp)
    for c in sch.get_consumers(local):
        if is_elementwise(sch.get(c)) and not ok(sch.reverse_compute_inline, c):
            sch = attempt(sch, lambda s: s.reverse_compute_at(c, thread_loop))
    return sch

