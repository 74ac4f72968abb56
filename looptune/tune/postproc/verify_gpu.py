"""VerifyGPUCode: reject schedules that cannot launch, or launch badly, on the target GPU.
`gpu_code_errors(func, target)` says what is wrong, each limit with the amount it is exceeded
by; the postprocessor refuses a schedule with any. Checked on the GpuProgram that
codegen.gpu.lower_gpu makes of it (what the CUDA build launches):

- every top-level loop nest is bound to blockIdx / threadIdx (else it would run on the host);
- threads per block (the product over threadIdx.x/y/z of the largest extent bound to each:
  loops with one tag share the index) and per dimension;
- shared memory per block (the shared buffers of a kernel, as compacted by lowering);
- registers: the per-thread local arrays, in 32-bit words, within min(255, registers per
  block / threads) less a reserve for addresses and temporaries;
- virtual threads per kernel, and the bytes of a vector access."""
from __future__ import annotations

from math import prod

from ...backend import Backend
from ...codegen.gpu import lower_gpu
from ...error import BuildError
from ...target import Target
from ...tir import dtype as dt
from ...tir.expr import BufferLoad
from ...tir.functor import find_stmts, visit
from ...tir.stmt import Allocate, BufferStore, For
from .base import Postproc
from .rewrite_unbound_block import top_level_nests, unbound_nests

_DIM_LIMITS = {"threadIdx.x": 1024, "threadIdx.y": 1024, "threadIdx.z": 64,
               "blockIdx.x": (1 << 31) - 1, "blockIdx.y": 65535, "blockIdx.z": 65535}


def gpu_code_errors(func, target, *, max_vthreads: int = 8, max_vector_bytes: int = 16,
                    register_reserve: int = 16, stage1=None) -> list:
    """What keeps the scheduled `func` from running well on `target` (a cuda Target): a list
    of messages, empty when it is fine. `stage1()`, if given, returns func's stage-1 lowering
    (a Schedule's is memoized, and the cost model's features read the same one)."""
    extra = dict(target.extra)
    max_threads = int(extra.get("max_threads_per_block", 1024))
    max_shared = int(extra.get("max_shared_memory_per_block_optin",
                               extra.get("shared_memory_bytes", 49152)))
    max_regs = int(extra.get("max_registers_per_block", 65536))
    errors = [f"the loop nest of block(s) {', '.join(names)} is not bound to GPU threads and "
              "would run on the host; bind it (the auto-bind rule or the rewrite-unbound-block "
              "postprocessor does)" for names in unbound_nests(func)]
    errors += _vthread_errors(func, max_vthreads)
    for lp in find_stmts(func.body, For):
        if lp.kind == "vectorized":
            nbytes = lp.extent * max((dt.nbytes(b.dtype) for b in _buffers_in(lp)), default=4)
            if nbytes > max_vector_bytes:
                errors.append(f"vectorized loop {lp.loop_var.name} moves {nbytes} bytes per "
                              f"access, {nbytes - max_vector_bytes} more than the "
                              f"{max_vector_bytes}-byte vector limit")
    if errors:
        return errors
    try:
        program = lower_gpu(func, target, vectorize=False,
                            loops=stage1() if stage1 is not None else None)
    except BuildError as e:
        return [f"GPU lowering failed: {e}"]
    for k in program.kernels:
        extents = _extents(k)
        threads = k.threads_per_block
        if threads > max_threads:
            errors.append(f"{k.name}: {threads} threads per block "
                          f"({' x '.join(str(x) for x in k.block if x > 1)}) exceed the "
                          f"target's max_threads_per_block {max_threads} by "
                          f"{threads - max_threads}")
        for tag, ext in extents.items():
            if ext > _DIM_LIMITS.get(tag, ext):
                errors.append(f"{k.name}: {tag} extent {ext} exceeds the limit "
                              f"{_DIM_LIMITS[tag]} of that dimension by {ext - _DIM_LIMITS[tag]}")
        if k.shared_bytes > max_shared:
            errors.append(f"{k.name}: {k.shared_bytes} bytes of shared memory per block "
                          f"({', '.join(b.name for b in k.shared)}) exceed the target's "
                          f"max_shared_memory_per_block_optin {max_shared} by "
                          f"{k.shared_bytes - max_shared}")
        words = sum(-(-a.buffer.size * dt.nbytes(a.buffer.dtype) // 4)
                    for a in find_stmts(k.body, Allocate) if a.buffer.scope == "local")
        budget = min(255, max_regs // max(threads, 1)) - register_reserve
        if words > budget:
            errors.append(f"{k.name}: {words} registers of local arrays per thread exceed the "
                          f"budget {budget} (min(255, max_registers_per_block {max_regs} / "
                          f"{threads} threads) - {register_reserve} reserved) by "
                          f"{words - budget}")
    return errors


def _extents(kernel) -> dict:
    out = {}
    for lp in find_stmts(kernel.body, For):
        if lp.kind == "thread_binding":
            out[lp.thread] = max(out.get(lp.thread, 1), lp.extent)
    return out


def _buffers_in(loop) -> set:
    out = set()
    visit(loop.body, lambda n: out.add(n.buffer) if isinstance(n, (BufferLoad, BufferStore))
          else None)
    return out


def _vthread_errors(func, max_vthreads: int) -> list:
    errors = []
    for nest in top_level_nests(func):
        per_tag = {}
        for lp in find_stmts(nest, For):
            if lp.kind == "thread_binding" and lp.thread.startswith("vthread"):
                per_tag[lp.thread] = max(per_tag.get(lp.thread, 1), lp.extent)
        n = prod(per_tag.values())
        if n > max_vthreads:
            errors.append(f"{n} virtual threads in one kernel exceed the limit {max_vthreads} "
                          f"by {n - max_vthreads}")
    return errors


@Postproc.registry.register("verify-gpu-code")
class VerifyGPUCode(Postproc):
    """max_vthreads: virtual threads per kernel (each multiplies a thread's registers);
    max_vector_bytes: the widest vector access (16: float4); register_reserve: registers per
    thread kept for other values than local arrays."""

    def __init__(self, max_vthreads: int = 8, max_vector_bytes: int = 16,
                 register_reserve: int = 16):
        self.max_vthreads = max_vthreads
        self.max_vector_bytes = max_vector_bytes
        self.register_reserve = register_reserve
        self.target = None

    def initialize_with_tune_context(self, context) -> None:
        self.target = context.target

    def check(self, sch) -> list:
        """The reasons `sch` is refused (empty: accepted)."""
        target = self.target if self.target is not None else Target.create("cuda")
        return gpu_code_errors(sch.func, target, max_vthreads=self.max_vthreads,
                               max_vector_bytes=self.max_vector_bytes,
                               register_reserve=self.register_reserve,
                               stage1=lambda: Backend.for_target(target).lower_loops(sch))

    def apply(self, sch) -> bool:
        return not self.check(sch)
