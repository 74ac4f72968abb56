"""Warp shuffles for cross-thread reductions (cross_thread.py): a row's T partials combined
in registers with __shfl_down_sync, as CUDA's fast block reductions do. For T a power of two
up to 32 (W = T lanes per row, no shared memory, no barrier), and for T a multiple of 32
(W = 32, then one partial per warp through shared memory, one barrier):

    for s in W/2, ..., 1: red[0] = red[0] op shfl_down(red[0], s, W)   (within each warp)
    for tx': if tx' % 32 == 0: red_sh[row * T/32 + tx' / 32] = red[0]       (T > 32 only)
    sync
    for tx': if tx' < 32:                                      (the row's first warp)
        red[0] = tx' < T/32 ? red_sh[row * T/32 + tx'] : identity
        for s in P/2, ..., 1: red[0] = red[0] op shfl_down(red[0], s, 32)   (P >= T/32)

leaving the row's result in red[0] of its thread tx' == 0."""
from __future__ import annotations

from ...tir.buffer import Buffer
from ...tir.expr import BufferLoad, binary, const
from ...tir.stmt import BufferStore, IfThenElse, barrier, seq, shfl_down

WARP = 32
# the element types __shfl_down_sync has an overload for (cuda_fp16.h, cuda_bf16.h included)
SHUFFLE_DTYPES = frozenset(("int32", "int64", "float16", "bfloat16", "float32", "float64"))


def can_shuffle(red_threads, row_threads, launch: dict, dtype: str) -> bool:
    """May the reduction over `red_threads` (its threadIdx loops) combine by warp shuffles?
    Lanes are numbered tx + ty * bdx + tz * bdx * bdy, so the reduction's threads are
    consecutive lanes only when they are exactly threadIdx.x, all of it (launch x == T); then
    a row is a group of T lanes (T <= 32) or of whole warps (T a multiple of 32). Every lane
    must reach the shuffles: the row loops span their launch extents, and the block is whole
    warps. `launch`: the kernel's extent per thread tag."""
    if dtype not in SHUFFLE_DTYPES or len(red_threads) != 1:
        return False
    lp = red_threads[0]
    T = lp.extent
    if lp.thread != "threadIdx.x" or launch.get("threadIdx.x") != T:
        return False
    if not (T <= WARP and T & (T - 1) == 0 or T % WARP == 0 and T <= WARP * WARP):
        return False
    if any(r.extent != launch.get(r.thread) for r in row_threads):
        return False
    threads = 1
    for a in "xyz":
        threads *= launch.get(f"threadIdx.{a}", 1)
    return threads % WARP == 0


def warp_combine(local: Buffer, op: str, identity, T: int, rows: int, rt, row, in_threads):
    """(statements, shared buffers) combining every thread's red[0] = `local[0]` into that
    of the row's thread rt == 0. `in_threads` wraps a statement in the reduction's thread
    loop, whose index is `rt`; `row` numbers the row (of `rows`)."""
    zero = const(0)
    red = BufferLoad(local, (zero,), local.dtype)

    def rounds(first: int, width: int):
        out, s = [], first
        while s >= 1:
            out.append(BufferStore(local, binary(op, red, shfl_down(red, s, width)), (zero,)))
            s //= 2
        return out

    stmts = rounds(min(T, WARP) // 2, min(T, WARP))
    if T <= WARP:
        return stmts, []
    warps = T // WARP
    shared = Buffer(f"{local.name}_shared", (rows * warps,), local.dtype, "shared")

    def slot(w):
        return w if rows == 1 else binary("+", binary("*", row, const(warps)), w)

    lead = binary("==", binary("%", rt, const(WARP)), zero)
    stmts += [in_threads(IfThenElse(lead, BufferStore(
                  shared, red, (slot(binary("//", rt, const(WARP))),)))),
              barrier()]
    load = IfThenElse(binary("<", rt, const(warps)),
                      BufferStore(local, BufferLoad(shared, (slot(rt),), local.dtype), (zero,)),
                      BufferStore(local, identity, (zero,)))
    p = 1
    while p < warps:
        p *= 2
    stmts.append(in_threads(IfThenElse(binary("<", rt, const(WARP)),
                                       seq(load, *rounds(p // 2, WARP)))))
    return stmts, [shared]
