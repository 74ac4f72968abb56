"""gpu-matmul: one reduction with data reuse whose inputs are indexed by plain loop variables
(matmul, batch_matmul, dense, their transposed forms, a vector times a matrix stored (K, N)),
with an elementwise epilogue.

    for b, io, jo in blockIdx.x:                      a (ti*vi) x (tj*vj) tile of C
      for ti, tj in threadIdx.x (ti*tj threads):     each thread: vi x vj outputs, in registers
        for ko:                                       the reduction in steps of kt
          A_shared, B_shared <- the step's tiles      (every thread copies a share)
          for ki, iv, jv: C_local[iv, jv] += A_shared[..] * B_shared[..]
        C[..] = epilogue(C_local[iv, jv])

Each thread's vi x vj outputs are contiguous (the register tile is one dense region, which
its write-back needs). Large matrices get two virtual threads along i and j: a thread
accumulates 2 x 2 tiles of 4 x 4, half a block tile apart (128 x 128 per block), 64 fused
multiply-adds for every 16 values it reads from shared memory, twice the 4 x 4 tile's
ratio; the rows of A's tile are then padded by one element so that the two rows a warp
reads at once sit in different banks. Sizes follow the shape: up to 16 x 16 threads of
4 x 4 outputs and kt = 16 (a divisor of the reduction between 8 and 16 where there is one);
fewer for small extents, more threads along j when i is short (a matrix-vector product),
smaller tiles while there are fewer thread blocks than multiprocessors; kt halves until the
tiles fit in shared memory. The copies into shared memory are fused and spread over the
same threadIdx.x (loops with one thread tag share the hardware index), so the block fetches
each tile once."""
from __future__ import annotations

from math import prod

from ...tir import dtype as dt
from ...tir.expr import IntImm, Var
from ...tune.schedule_rule.analysis import loop_kinds
from ..base import Rule, block_names, ok
from .common import (accumulate_in_registers, bind_rest, extents, fuse, is_reduction,
                     max_threads, pow2_ceil, prepare, reduces_along_rows, stage_in_shared,
                     streaming)


@Rule.registry.register("gpu-matmul")
class Matmul(Rule):
    """threads: the most threads along i (and along j, unless i is short); per_thread: the
    most outputs a thread accumulates along i and along j; k_tile: the reduction step;
    virtual: virtual threads along i and j for large matrices (per_thread x virtual outputs
    a thread along each)."""

    def __init__(self, *, threads: int = 16, per_thread: int = 4, k_tile: int = 16,
                 virtual: int = 2):
        self.threads, self.per_thread, self.k_tile = threads, per_thread, k_tile
        self.virtual = virtual

    def apply(self, func_or_sch, target):
        sch = prepare(func_or_sch)
        reds = [n for n in block_names(sch) if is_reduction(sch.get(sch.get_block(n)))]
        if len(reds) != 1:
            return None
        b = sch.get_block(reds[0])
        blk = sch.get(b)
        if not _plain(blk) or (streaming(blk) and (reduces_along_rows(blk) or
                                                   len(blk.reads) < 2)):
            return None  # a window (convolution), or a row reduction
        kinds = loop_kinds(sch, b)
        if "O" in kinds or kinds.count("R") != 1:
            return None
        axes = _axes(sch, b)
        if axes is None:
            return None
        (batch, i, j, k), ijk = axes
        cap = max_threads(target)
        n_i, n_j = sch.get(i).extent if i is not None else 1, sch.get(j).extent
        ti, vi = _tile(n_i, min(self.threads, cap), self.per_thread)
        # a short i leaves its threads to j (a matrix times a few vectors)
        j_cap = cap // ti if ti < self.threads else min(self.threads, cap // ti)
        tj, vj = _tile(n_j, j_cap, self.per_thread)
        ti, vi, tj, vj = _enough_blocks((ti, vi, tj, vj), (n_i, n_j), extents(sch, batch),
                                        target.cores, target.warp_size)
        # large tiles: two virtual threads along i and j (8 x 8 outputs a thread, as 2 x 2
        # tiles of 4 x 4 a block-tile half apart), when the blocks still fill the GPU
        wi = wj = 1
        if i is not None and self.virtual > 1 and vi == vj == self.per_thread and \
                _blocks((ti * vi * self.virtual, tj * vj * self.virtual), (n_i, n_j),
                        extents(sch, batch)) >= 2 * target.cores and \
                n_i % (ti * vi * self.virtual) == 0 and n_j % (tj * vj * self.virtual) == 0:
            wi = wj = self.virtual
        kt = _k_step(sch.get(k).extent, self.k_tile)
        while _shared_bytes(blk, ijk, (ti * vi * wi, tj * vj * wj, kt)) > \
                target.max_shared_memory_per_block and kt > 1:
            kt //= 2
        # tiles
        if i is not None:
            io, iw, it, iv = sch.split(i, [None, wi, ti, vi])
        jo, jw, jt, jv = sch.split(j, [None, wj, tj, vj])
        ko, ki = sch.split(k, [None, kt])
        outer = [*batch, *([io] if i is not None else []), jo]
        virtual = [*([iw] if i is not None else []), jw]
        threads = [*([it] if i is not None else []), jt]
        inner = [*([iv] if i is not None else []), jv]
        sch.reorder(*outer, *virtual, *threads, ko, ki, *inner)
        sch.bind(fuse(sch, outer), "blockIdx.x")
        if wi * wj > 1:
            sch.bind(fuse(sch, virtual), "vthread.x")
        tx = fuse(sch, threads)
        sch.bind(tx, "threadIdx.x")
        # every input's tile of a reduction step in shared memory, fetched by all threads
        for index in range(len(blk.reads)):
            cache = sch.cache_read(b, index, "shared")
            stage_in_shared(sch, cache, ko, ti * tj)
            if wi > 1 and _rows_along_k(blk.reads[index], ijk[2]):
                # a tile read across its rows (A[i, k]: the threads of a warp read rows
                # 4 apart): rows padded by one element, so those rows fall in other banks
                ok(sch.storage_align, cache, 0, len(blk.reads[index].region) - 2, 32,
                   (kt + 1) % 32)
        # the accumulators in registers, written back (through the epilogue) by their thread
        sch = accumulate_in_registers(sch, b, tx, ko, inner)
        return bind_rest(sch, target)


def _blocks(tile, shape, batch) -> int:
    return prod(batch) * -(-shape[0] // tile[0]) * -(-shape[1] // tile[1])


def _rows_along_k(read, k) -> bool:
    """Is the read's last (contiguous) index the reduction variable, with a dimension
    before it (A[i, k])?"""
    return len(read.region) >= 2 and read.region[-1][0] is k


def _plain(block) -> bool:
    """Is every buffer access of the block's reads and writes an iteration variable or a
    constant in each dimension (no window, no stride)?"""
    ivs = {id(iv.var) for iv in block.iter_vars}
    for r in (*block.reads, *block.writes):
        for mn, ext in r.region:
            if ext != 1 or not (isinstance(mn, IntImm) or (isinstance(mn, Var) and id(mn) in ivs)):
                return False
    return True


def _axes(sch, b):
    """((batch loops, i loop or None, j loop, k loop), (i, j, k iteration variables)): j
    drives the output's last index, i its second last, k is the reduction; None where the
    output's indices are not loops."""
    blk = sch.get(b)
    values = sch.realize(b).iter_values
    loops, kinds = sch.get_loops(b), loop_kinds(sch, b)
    loop_of, var_of = {}, {}
    for lp in loops:
        var = sch.get(lp).loop_var
        for iv, v in zip(blk.iter_vars, values):
            if v is var:
                loop_of[id(iv.var)], var_of[lp] = lp, iv.var
    idx = [mn for mn, _ in blk.writes[0].region]
    j = loop_of.get(id(idx[-1])) if idx else None
    if j is None:
        return None
    i = loop_of.get(id(idx[-2])) if len(idx) > 1 else None
    spatial = [lp for lp, kd in zip(loops, kinds) if kd == "S"]
    (k,) = [lp for lp, kd in zip(loops, kinds) if kd == "R"]
    if i is j or (i is not None and i not in spatial) or j not in spatial or k not in var_of:
        return None
    batch = [lp for lp in spatial if lp is not i and lp is not j]
    return (batch, i, j, k), (var_of.get(i), var_of[j], var_of[k])


def _shared_bytes(block, ijk, tile) -> int:
    """The shared memory the block's input tiles take: each read's extent is the tile's
    along i, j and k (ti * vi, tj * vj, kt), 1 along the rest."""
    total = 0
    for r in block.reads:
        n = dt.nbytes(r.buffer.dtype)
        for mn, _ in r.region:
            n *= next((t for v, t in zip(ijk, tile) if v is not None and mn is v), 1)
        total += n
    return total


def _tile(n: int, threads: int, per_thread: int) -> tuple:
    """(threads, outputs per thread) along an axis of extent n."""
    v = min(per_thread, 4 if n >= 64 else 2 if n >= 16 else 1)
    return min(threads, pow2_ceil(-(-n // v))), v


def _enough_blocks(tile, shape, batch, sms: int, min_threads: int) -> tuple:
    """Smaller tiles while there are fewer thread blocks than multiprocessors: the larger
    of the two tile sides shrinks, first its outputs per thread, then its threads (down to
    `min_threads` a block)."""
    ti, vi, tj, vj = tile
    n_i, n_j = shape

    def blocks():
        return prod(batch) * -(-n_i // (ti * vi)) * -(-n_j // (tj * vj))

    while blocks() < sms:
        if ti * vi >= tj * vj and vi > 1:
            vi //= 2
        elif tj * vj >= ti * vi and vj > 1:
            vj //= 2
        elif vi > 1:
            vi //= 2
        elif vj > 1:
            vj //= 2
        elif ti * tj > min_threads and (ti >= tj and ti > 1 or tj == 1):
            ti //= 2
        elif ti * tj > min_threads and tj > 1:
            tj //= 2
        else:
            break
    return ti, vi, tj, vj


def _k_step(n: int, most: int) -> int:
    """The reduction step: n when it fits, else a divisor of n between most / 2 and most (no
    guarded last step, which lowering would peel off with tiles of its own), else most."""
    if n <= most:
        return n
    return max((d for d in range(most // 2, most + 1) if n % d == 0), default=most)
