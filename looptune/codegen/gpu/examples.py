"""Hand-written GPU programs: the shapes lowering produces, for tests of the renderer and
the interpreter that should not depend on lowering."""
from __future__ import annotations

from ...tir.buffer import Buffer
from ...tir.expr import BufferLoad, Var, binary, const
from ...tir.func import PrimFunc
from ...tir.stmt import BufferStore, For, barrier, seq
from .program import GpuProgram, Kernel


def _ld(buf, idx):
    return BufferLoad(buf, (idx,), buf.dtype)


def tiled_matmul(n: int = 32, tile: int = 8, *, with_barriers: bool = True) -> GpuProgram:
    """C = A @ B (n x n, float32), one tile x tile block of C per thread block, one element
    per thread, A and B staged through shared memory tile by tile:

        for bx, by (blockIdx): for tx, ty (threadIdx):
          acc = 0
          for ko: As[ty, tx] = A[..]; Bs[ty, tx] = B[..]; sync
                  for ki: acc += As[ty, ki] * Bs[ki, tx]; sync
          C[..] = acc

    Without barriers, threads read tiles other threads have not written yet (a race)."""
    assert n % tile == 0
    A, B, C = (Buffer(x, (n * n,), "float32") for x in "ABC")
    As = Buffer("As", (tile * tile,), "float32", "shared")
    Bs = Buffer("Bs", (tile * tile,), "float32", "shared")
    acc = Buffer("acc", (1,), "float32", "local")
    bx, by, tx, ty, ko, ki = (Var(x) for x in ("bx", "by", "tx", "ty", "ko", "ki"))
    t = const(tile)
    row = binary("+", binary("*", by, t), ty)
    col = binary("+", binary("*", bx, t), tx)
    nn = const(n)
    load_a = BufferStore(As, _ld(A, binary("+", binary("*", row, nn),
                                           binary("+", binary("*", ko, t), tx))),
                         (binary("+", binary("*", ty, t), tx),))
    load_b = BufferStore(Bs, _ld(B, binary("+", binary("*", binary("+", binary("*", ko, t), ty), nn),
                                           col)),
                         (binary("+", binary("*", ty, t), tx),))
    update = BufferStore(acc, binary("+", _ld(acc, const(0)),
                                     binary("*", _ld(As, binary("+", binary("*", ty, t), ki)),
                                            _ld(Bs, binary("+", binary("*", ki, t), tx)))),
                         (const(0),))
    sync = (barrier(),) if with_barriers else ()
    ko_body = seq(load_a, load_b, *sync, For(ki, tile, "serial", update), *sync)
    from ...tir.stmt import Allocate
    thread_body = Allocate(acc, seq(BufferStore(acc, const(0.0, "float32"), (const(0),)),
                                    For(ko, n // tile, "serial", ko_body),
                                    BufferStore(C, _ld(acc, const(0)),
                                                (binary("+", binary("*", row, nn), col),))))
    body = For(bx, n // tile, "thread_binding", For(by, n // tile, "thread_binding", For(
        tx, tile, "thread_binding", For(ty, tile, "thread_binding", thread_body, "threadIdx.y"),
        "threadIdx.x"), "blockIdx.y"), "blockIdx.x")
    func = PrimFunc("tiled_matmul", (A, B, C), body)
    kernel = Kernel("tiled_matmul_kernel0", body, (A, B, C), (n // tile, n // tile, 1),
                    (tile, tile, 1), (As, Bs))
    return GpuProgram(func, (kernel,))
