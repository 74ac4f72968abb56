"""Small hand-built GPU programs for the interpreter's tests: each shows one thing the
hardware does (shared memory per block, private locals, guarded thread loops) or one way to
get synchronization wrong (a divergent barrier, a race on shared or global memory)."""
from __future__ import annotations

from looptune.codegen.gpu import GpuProgram, Kernel
from looptune.tir.buffer import Buffer
from looptune.tir.expr import BufferLoad, Var, binary, cast, const
from looptune.tir.func import PrimFunc
from looptune.tir.stmt import Allocate, BufferStore, For, IfThenElse, barrier, seq


def ld(buf, idx):
    return BufferLoad(buf, (idx,), buf.dtype)


def st(buf, idx, value):
    return BufferStore(buf, value, (idx,))


def bound(var, extent, tag, body):
    return For(var, extent, "thread_binding", body, tag)


def one_kernel(name, params, body, *, grid=(1, 1, 1), block=(1, 1, 1), shared=()) -> GpuProgram:
    func = PrimFunc(name, tuple(params), body)
    return GpuProgram(func, (Kernel(f"{name}_kernel0", body, tuple(params), grid, block,
                                    tuple(shared)),))


def _plus(*xs):
    out = xs[0]
    for x in xs[1:]:
        out = binary("+", out, x)
    return out


def shared_per_block(blocks: int = 3, threads: int = 4) -> GpuProgram:
    """Each block reads its fresh shared tile (all NaN) into `first`, fills it from A, syncs,
    and writes it reversed: out[b, t] = A[b, threads - 1 - t] (threads read each other's
    writes)."""
    n = blocks * threads
    A, first, out = (Buffer(x, (n,), "float32") for x in ("A", "first", "out"))
    S = Buffer("S", (threads,), "float32", "shared")
    bx, tx = Var("bx"), Var("tx")
    g = _plus(binary("*", bx, const(threads)), tx)
    body = seq(st(first, g, ld(S, tx)),
               st(S, tx, ld(A, g)),
               barrier(),
               st(out, g, ld(S, binary("-", const(threads - 1), tx))))
    body = bound(bx, blocks, "blockIdx.x", bound(tx, threads, "threadIdx.x", body))
    return one_kernel("shared_per_block", (A, first, out), body, grid=(blocks, 1, 1),
                      block=(threads, 1, 1), shared=(S,))


def local_private(threads: int = 4) -> GpuProgram:
    """Each thread keeps A[t] in a local buffer across a barrier: out[t] = 2 * A[t]."""
    A, out = (Buffer(x, (threads,), "float32") for x in ("A", "out"))
    loc = Buffer("loc", (1,), "float32", "local")
    tx = Var("tx")
    body = Allocate(loc, seq(st(loc, const(0), ld(A, tx)), barrier(),
                             st(out, tx, binary("*", ld(loc, const(0)), const(2.0, "float32")))))
    return one_kernel("local_private", (A, out), bound(tx, threads, "threadIdx.x", body),
                      block=(threads, 1, 1))


def guarded(launch: int = 8, extent: int = 5) -> GpuProgram:
    """Two loops on threadIdx.x in one kernel: one over all `launch` threads
    (out1[t] = A[t]), one over only the first `extent` (out2[t] = 2 * A[t])."""
    A, out1, out2 = (Buffer(x, (launch,), "float32") for x in ("A", "out1", "out2"))
    t1, t2 = Var("t1"), Var("t2")
    body = seq(bound(t1, launch, "threadIdx.x", st(out1, t1, ld(A, t1))),
               bound(t2, extent, "threadIdx.x",
                     st(out2, t2, binary("*", ld(A, t2), const(2.0, "float32")))))
    return one_kernel("guarded", (A, out1, out2), body, block=(launch, 1, 1))


def divergent_barrier(threads: int = 8, *, else_barrier: bool = False) -> GpuProgram:
    """A barrier inside `if tx < threads / 2`: the other half never reaches it (they run
    to the end, or with `else_barrier` wait at a different barrier). Threads read only
    their own element, so the barrier is the only thing wrong."""
    A, out = (Buffer(x, (threads,), "float32") for x in ("A", "out"))
    S = Buffer("S", (threads,), "float32", "shared")
    tx = Var("tx")
    cond = binary("<", tx, const(threads // 2))
    body = seq(st(S, tx, ld(A, tx)),
               IfThenElse(cond, barrier(), barrier() if else_barrier else None),
               st(out, tx, ld(S, tx)))
    return one_kernel("divergent", (A, out), bound(tx, threads, "threadIdx.x", body),
                      block=(threads, 1, 1), shared=(S,))


def global_write_write(threads: int = 4) -> GpuProgram:
    """Every thread stores its own value to out[0]: what a reduction loop bound to
    threadIdx without a cross-thread reduction does."""
    A = Buffer("A", (threads,), "float32")
    out = Buffer("out", (1,), "float32")
    tx = Var("tx")
    return one_kernel("write_write", (A, out),
                      bound(tx, threads, "threadIdx.x", st(out, const(0), ld(A, tx))),
                      block=(threads, 1, 1))


def global_accumulate(blocks: int = 4) -> GpuProgram:
    """out[0] += A[b] in every block: a reduction bound to blockIdx."""
    A = Buffer("A", (blocks,), "float32")
    out = Buffer("out", (1,), "float32")
    bx = Var("bx")
    body = st(out, const(0), binary("+", ld(out, const(0)), ld(A, bx)))
    return one_kernel("accumulate", (A, out), bound(bx, blocks, "blockIdx.x", body),
                      grid=(blocks, 1, 1))


def global_neighbour(threads: int = 4, *, with_barrier: bool) -> GpuProgram:
    """mid[t] = A[t]; [sync]; out[t] = mid[(t + 1) % threads], in one block: correct only
    with the barrier (a barrier orders global memory within a block too)."""
    A, mid, out = (Buffer(x, (threads,), "float32") for x in ("A", "mid", "out"))
    tx = Var("tx")
    nxt = binary("%", binary("+", tx, const(1)), const(threads))
    body = seq(st(mid, tx, ld(A, tx)), barrier() if with_barrier else None,
               st(out, tx, ld(mid, nxt)))
    return one_kernel("neighbour", (A, mid, out), bound(tx, threads, "threadIdx.x", body),
                      block=(threads, 1, 1))


def shared_broadcast(threads: int = 4, *, same_value: bool) -> GpuProgram:
    """Every thread writes S[0] (A[0] for all, or its own A[t]), syncs, and reads it:
    out[t] = S[0]. Redundant writes of one value are harmless; different values race."""
    A, out = (Buffer(x, (threads,), "float32") for x in ("A", "out"))
    S = Buffer("S", (1,), "float32", "shared")
    tx = Var("tx")
    body = seq(st(S, const(0), ld(A, const(0) if same_value else tx)), barrier(),
               st(out, tx, ld(S, const(0))))
    return one_kernel("broadcast", (A, out), bound(tx, threads, "threadIdx.x", body),
                      block=(threads, 1, 1), shared=(S,))


def shift(threads: int = 4, *, in_load: bool) -> GpuProgram:
    """out[t - 1] = A[t] (`in_load`: out[t] = A[t - 1]): thread 0 goes out of bounds."""
    A, out = (Buffer(x, (threads,), "float32") for x in ("A", "out"))
    tx = Var("tx")
    prev = binary("-", tx, const(1))
    body = st(out, tx, ld(A, prev)) if in_load else st(out, prev, ld(A, tx))
    return one_kernel("shift", (A, out), bound(tx, threads, "threadIdx.x", body),
                      block=(threads, 1, 1))


def fma(dtype: str, n: int = 8, threads: int = 4) -> GpuProgram:
    """out[i] = A[i] * B[i] + C[i] over `dtype` buffers, staged through a shared tile and
    a cast to float32 and back (out2[i] = dtype(float32(A[i]) * 3))."""
    A, B, C, out, out2 = (Buffer(x, (n,), dtype) for x in ("A", "B", "C", "out", "out2"))
    S = Buffer("S", (threads,), dtype, "shared")
    bx, tx = Var("bx"), Var("tx")
    i = _plus(binary("*", bx, const(threads)), tx)
    body = seq(st(S, tx, ld(A, i)), barrier(),
               st(out, i, binary("+", binary("*", ld(S, tx), ld(B, i)), ld(C, i))),
               st(out2, i, cast(binary("*", cast(ld(S, tx), "float32"), const(3.0, "float32")),
                                dtype)))
    body = bound(bx, n // threads, "blockIdx.x", bound(tx, threads, "threadIdx.x", body))
    return one_kernel(f"fma_{dtype}", (A, B, C, out, out2), body, grid=(n // threads, 1, 1),
                      block=(threads, 1, 1), shared=(S,))
