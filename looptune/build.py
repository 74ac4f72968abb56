"""looptune.build: a schedule or PrimFunc -> a compiled, callable module (a CPU Module, or on
a cuda target a runtime.cuda.CudaModule), through the target's Backend."""
from __future__ import annotations

from .backend import Backend, args_info, written_params
from .tir.func import PrimFunc

__all__ = ["args_info", "build", "generate_source", "lower_for_gpu", "written_params"]


def generate_source(sch_or_func, target="cpu") -> tuple[PrimFunc, str]:
    """(the scheduled PrimFunc, its C or, on a cuda target, CUDA source), without compiling
    (CUDA source needs no GPU and no CUDA installed)."""
    source = Backend.for_target(target).generate(sch_or_func)
    return source.func, source.text


def lower_for_gpu(func: PrimFunc, target):
    """The GpuProgram of a function whose loops are bound to blockIdx / threadIdx."""
    return Backend.for_target(target).lower(func)


def build(sch_or_func, target="cpu", *, num_threads: int | None = None, flags=None,
          timeout: float | None = None):
    """Lower, render, compile (cached) and load. `num_threads` sets the module's thread
    count for parallel loops (default: OpenMP's, i.e. all cores). On a cuda target the
    result is a CudaModule (runtime/cuda.py; `flags` are compiler options, `num_threads` is
    ignored), and a BuildError says so when no GPU can be used here. The module's
    `artifact` says what was compiled, and for which ISA."""
    return Backend.for_target(target).build(sch_or_func, num_threads=num_threads, flags=flags,
                                            timeout=timeout)
