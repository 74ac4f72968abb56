"""What GPU lowering produces: a program of kernels, each a per-thread body with its launch
shape. The CUDA renderer prints it; the interpreter runs it thread by thread."""
from __future__ import annotations

from dataclasses import dataclass

from ...tir.func import PrimFunc
from ...tir.stmt import Stmt

THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")


@dataclass(frozen=True, eq=False)
class Kernel:
    """One `__global__` function.

    `body` is the code each thread runs. A loop of kind "thread_binding" in it is not a loop
    but a name for the hardware index of its tag (`v = threadIdx.x`); where its extent is
    less than the launch's, the body runs only for `v < extent`. Loops with the same tag
    anywhere in the kernel share the index. Buffers are flat (1-D): the global ones are the
    function's parameters and the program's intermediates, shared ones are in `shared`
    (allocated once per thread block, before any thread runs), and `Allocate` statements in
    the body are "local": private to each thread. Barriers are `tir.stmt.barrier()`.
    """
    name: str
    body: Stmt
    params: tuple           # global buffers the kernel touches, in the order passed
    grid: tuple             # (x, y, z) thread blocks
    block: tuple            # (x, y, z) threads per block
    shared: tuple = ()      # shared-scope buffers

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def shared_bytes(self) -> int:
        from ...tir import dtype as dt
        return sum(b.size * dt.nbytes(b.dtype) for b in self.shared)


@dataclass(frozen=True, eq=False)
class GpuProgram:
    """The kernels of one PrimFunc, launched in order. `func` is the lowered function (its
    params are the flat global buffers users pass); `intermediates` are global buffers that
    live between kernels, which the runtime allocates."""
    func: PrimFunc
    kernels: tuple
    intermediates: tuple = ()
