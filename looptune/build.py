"""looptune.build: a schedule or PrimFunc -> a compiled, callable module (a CPU Module, or on
a cuda target a runtime.cuda.CudaModule)."""
from __future__ import annotations

from .codegen import CRenderer, lower
from .runtime.compiler import compile_shared
from .runtime.error import BuildError
from .runtime.module import ArgInfo, Module
from .schedule import Schedule
from .target import Target
from .tir.func import PrimFunc
from .tir.functor import find_stmts, visit
from .tir.stmt import BufferStore, For
from .tir.structural import structural_hash


def written_params(func: PrimFunc) -> set:
    out = set()

    def fn(n):
        if isinstance(n, BufferStore):
            out.add(n.buffer)
    visit(func.body, fn)
    return out


def args_info(func: PrimFunc) -> tuple:
    """The ArgInfo of each parameter of `func` (name, shape, dtype, whether it is written)."""
    written = written_params(func)
    return tuple(ArgInfo(b.name, b.shape, b.dtype, b in written) for b in func.params)


def _unpack(sch_or_func) -> tuple:
    if isinstance(sch_or_func, Schedule):
        return sch_or_func.func, sch_or_func.original, len(sch_or_func.trace)
    if isinstance(sch_or_func, PrimFunc):
        return sch_or_func, sch_or_func, 0
    raise TypeError(f"build needs a Schedule or a PrimFunc, got {type(sch_or_func).__name__}")


def generate_source(sch_or_func, target="cpu") -> tuple[PrimFunc, str]:
    """(the scheduled PrimFunc, its C or, on a cuda target, CUDA source), without compiling
    (CUDA source needs no GPU and no CUDA installed)."""
    func, source, _ = _generate(sch_or_func, target)
    return func, source


def _generate(sch_or_func, target) -> tuple:
    """(func, source, GpuProgram or None)."""
    func, original, trace_len = _unpack(sch_or_func)
    target = Target.create(target)
    meta = {"workload": structural_hash(original), "target": str(target),
            "trace": f"{trace_len} instructions"}
    if target.kind == "cuda":
        from .codegen.cuda import render_cuda
        program = lower_for_gpu(func, target)
        return func, render_cuda(program, meta=meta), program
    if target.kind != "cpu":
        raise BuildError(f"building for {target.kind} is not supported yet; use target='cpu' "
                         "or 'cuda'")
    return func, CRenderer().render(lower(func, vector_bits=target.vector_bits), meta=meta), None


def lower_for_gpu(func: PrimFunc, target):
    """The GpuProgram of a function whose loops are bound to blockIdx / threadIdx."""
    if not any(lp.kind == "thread_binding" for lp in find_stmts(func.body, For)):
        raise BuildError(f"building for cuda is not supported for {func.name} as it is: no loop "
                         "is bound to a GPU thread axis; bind them (sch.bind(loop, "
                         "'blockIdx.x'), sch.bind(loop, 'threadIdx.x')), or build with "
                         "target='cpu'")
    from .codegen.gpu import lower_gpu
    return lower_gpu(func, target)


def build(sch_or_func, target="cpu", *, num_threads: int | None = None, flags=None,
          timeout: float | None = None):
    """Lower, render, compile (cached) and load. `num_threads` sets the module's thread
    count for parallel loops (default: OpenMP's, i.e. all cores). On a cuda target the
    result is a CudaModule (runtime/cuda.py; `flags` are compiler options, `num_threads` is
    ignored), and a BuildError says so when no GPU can be used here."""
    func, source, program = _generate(sch_or_func, target)
    if program is not None:
        from .runtime.cuda import build_module
        return build_module(program, source, args_info(func), Target.create(target),
                            name=func.name, options=flags or (), timeout=timeout)
    path = compile_shared(source, name=func.name, flags=flags, timeout=timeout)
    mod = Module(path, CRenderer.symbol(func), list(args_info(func)), source, path.with_suffix(".c"))
    if num_threads is not None:
        mod.set_num_threads(num_threads)
    return mod
