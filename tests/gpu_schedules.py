"""Hand-written GPU schedules of small workloads, shared by the GPU tests: each returns a
Schedule whose loop nests are bound to blockIdx / threadIdx."""
from __future__ import annotations

from looptune import Schedule, te
from looptune.te.ops import workload


def func_of(name: str, **shape):
    tensors, reference, _ = workload(name, **shape)
    return te.create_prim_func(tensors), tensors, reference


def shared_matmul(M=32, N=32, K=32, tile=8, k_tile=8, *, cooperative=True) -> Schedule:
    """One tile x tile block of C per thread block, one element per thread, A and B staged
    through shared memory per k_tile step; fetched cooperatively (the copy loops bound to
    threadIdx.x too) or, without `cooperative`, by every thread whole."""
    func, _, _ = func_of("matmul", M=M, N=N, K=K)
    sch = Schedule(func)
    b = sch.get_block("matmul")
    i, j, k = sch.get_loops(b)
    io, ii = sch.split(i, [None, tile])
    jo, ji = sch.split(j, [None, tile])
    ko, ki = sch.split(k, [None, k_tile])
    sch.reorder(io, jo, ii, ji, ko, ki)
    sch.bind(sch.fuse(io, jo), "blockIdx.x")
    t = sch.fuse(ii, ji)
    sch.bind(t, "threadIdx.x")
    for index in (0, 1):
        cache = sch.cache_read(b, index, "shared")
        sch.compute_at(cache, ko)
        if cooperative:
            fused = sch.fuse(*sch.get_loops(cache)[-2:])
            _, inner = sch.split(fused, [None, tile * tile])
            sch.bind(inner, "threadIdx.x")
    local = sch.cache_write(b, 0, "local")
    sch.reverse_compute_at(local, t)
    return sch


def vthread_matmul(M=32, N=32, K=16, vt=2, tx=4, reg=2, k_tile=4) -> Schedule:
    """SSSRRSRS-like matmul with virtual threads: i and j each split into
    [block, vthread, threadIdx, register]; A and B staged through shared memory per k_tile
    step, fetched cooperatively; C accumulated in a local tile."""
    func, _, _ = func_of("matmul", M=M, N=N, K=K)
    sch = Schedule(func)
    b = sch.get_block("matmul")
    i, j, k = sch.get_loops(b)
    i0, i1, i2, i3 = sch.split(i, [None, vt, tx, reg])
    j0, j1, j2, j3 = sch.split(j, [None, vt, tx, reg])
    ko, ki = sch.split(k, [None, k_tile])
    sch.reorder(i0, j0, i1, j1, i2, j2, ko, ki, i3, j3)
    sch.bind(sch.fuse(i0, j0), "blockIdx.x")
    sch.bind(sch.fuse(i1, j1), "vthread.x")
    t = sch.fuse(i2, j2)
    sch.bind(t, "threadIdx.x")
    for index in (0, 1):
        cache = sch.cache_read(b, index, "shared")
        sch.compute_at(cache, ko)
        fused = sch.fuse(*sch.get_loops(cache)[-2:])
        _, inner = sch.split(fused, [None, tx * tx])
        sch.bind(inner, "threadIdx.x")
    local = sch.cache_write(b, 0, "local")
    sch.reverse_compute_at(local, t)
    return sch


def row_reduce(name="reduce_sum", M=7, N=13, threads=8) -> Schedule:
    """One thread block per row; the reduction split with its inner part on threadIdx.x."""
    func, _, _ = func_of(name, M=M, N=N)
    sch = Schedule(func)
    b = sch.get_block(name)
    i, k = sch.get_loops(b)
    ko, ki = sch.split(k, [None, threads])
    sch.reorder(i, ki, ko)
    sch.bind(i, "blockIdx.x")
    sch.bind(ki, "threadIdx.x")
    return sch


def row_per_block(name: str, reductions, threads: int, **shape) -> Schedule:
    """A row per thread block: each of `reductions` (blocks, last first) computed at the row
    and reduced across threads, the output block elementwise over the same threads."""
    func, _, _ = func_of(name, **shape)
    sch = Schedule(func)
    i, j = sch.get_loops(sch.get_block(name))
    sch.bind(i, "blockIdx.x")
    _, ji = sch.split(j, [None, threads])
    sch.bind(ji, "threadIdx.x")
    for red in reductions:
        b = sch.get_block(red)
        sch.compute_at(b, i)
        ko, ki = sch.split(sch.get_loops(b)[-1], [None, threads])
        sch.reorder(ki, ko)
        sch.bind(ki, "threadIdx.x")
    return sch


def softmax(M=5, N=11, threads=4) -> Schedule:
    """The row's max and sum reduced across threads, the output elementwise."""
    return row_per_block("softmax", ("softmax_expsum", "softmax_max"), threads, M=M, N=N)


def layer_norm(M=4, N=13, threads=4) -> Schedule:
    """Like softmax, with the row's mean and variance."""
    return row_per_block("layer_norm", ("layer_norm_var", "layer_norm_mean"), threads, M=M, N=N)

def conv2d(threads=32, **shape) -> Schedule:
    """Padding inlined; an output element per thread, accumulated in a register; the
    weights a thread block needs staged in shared memory, fetched cooperatively."""
    shape = shape or dict(N=1, C=3, H=7, W=6, K=4, R=3, S=3, stride=1, pad=1, dilation=1)
    func, _, _ = func_of("conv2d", **shape)
    sch = Schedule(func)
    sch.compute_inline(sch.get_block("pad"))
    b = sch.get_block("conv2d_nchw")
    n, k, y, x, rc, rr, rs = sch.get_loops(b)
    fused = sch.fuse(n, k, y, x)
    bx, tx = sch.split(fused, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    w = sch.cache_read(b, 1, "shared")
    sch.compute_at(w, bx)
    copy = sch.fuse(*sch.get_loops(w)[1:])
    _, inner = sch.split(copy, [None, threads])
    sch.bind(inner, "threadIdx.x")
    local = sch.cache_write(b, 0, "local")
    sch.reverse_compute_at(local, tx)
    return sch
