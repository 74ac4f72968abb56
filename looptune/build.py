"""looptune.build: a schedule or PrimFunc -> a compiled, callable module."""
from __future__ import annotations

from .codegen import CRenderer, lower
from .runtime.compiler import compile_shared
from .runtime.error import BuildError
from .runtime.module import ArgInfo, Module
from .schedule import Schedule
from .target import Target
from .tir.func import PrimFunc
from .tir.functor import visit
from .tir.stmt import BufferStore
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


def generate_source(sch_or_func, target="cpu") -> tuple[PrimFunc, str]:
    """(the scheduled PrimFunc, its C source), without compiling."""
    if isinstance(sch_or_func, Schedule):
        func, original, trace_len = sch_or_func.func, sch_or_func.original, len(sch_or_func.trace)
    elif isinstance(sch_or_func, PrimFunc):
        func, original, trace_len = sch_or_func, sch_or_func, 0
    else:
        raise TypeError(f"build needs a Schedule or a PrimFunc, got {type(sch_or_func).__name__}")
    target = Target.create(target)
    if target.kind != "cpu":
        raise BuildError(f"building for {target.kind} is not supported yet; use target='cpu'")
    meta = {"workload": structural_hash(original), "target": str(target),
            "trace": f"{trace_len} instructions"}
    return func, CRenderer().render(lower(func, vector_bits=target.vector_bits), meta=meta)


def build(sch_or_func, target="cpu", *, num_threads: int | None = None, flags=None,
          timeout: float | None = None) -> Module:
    """Lower, render C, compile (cached) and load. `num_threads` sets the module's thread
    count for parallel loops (default: OpenMP's, i.e. all cores)."""
    func, source = generate_source(sch_or_func, target)
    path = compile_shared(source, name=func.name, flags=flags, timeout=timeout)
    mod = Module(path, CRenderer.symbol(func), list(args_info(func)), source, path.with_suffix(".c"))
    if num_threads is not None:
        mod.set_num_threads(num_threads)
    return mod
