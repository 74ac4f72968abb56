"""looptune.build: a schedule or PrimFunc -> a compiled, callable module (a CPU Module, or on
a cuda target a runtime.cuda.CudaModule), through the target's Backend. `lower` shows the
loops a schedule lowers to."""
from __future__ import annotations

from .backend import Backend, args_info, unpack, written_params
from .error import BuildError
from .tir.func import PrimFunc

__all__ = ["args_info", "build", "generate_source", "lower", "lower_for_gpu", "written_params"]


def generate_source(sch_or_func, target="cpu") -> tuple[PrimFunc, str]:
    """(the scheduled PrimFunc, its C or, on a cuda target, CUDA source), without compiling
    (CUDA source needs no GPU and no CUDA installed; C for an ISA this machine lacks, such as
    target "llvm -mcpu=skylake-avx512" on an AVX2 machine, is made all the same)."""
    source = Backend.for_target(target).generate(sch_or_func)
    return source.func, source.text


def lower_for_gpu(func: PrimFunc, target):
    """The GpuProgram of a function whose loops are bound to blockIdx / threadIdx."""
    return Backend.for_target(target).lower(func)


def _split_spec(sch_or_func, spec: tuple, target) -> object:
    """The target of build(x, target), or of TVM's build(sch, args, target) and lower(sch,
    args), after checking that `args` (te tensors) are the function's parameters in order."""
    if len(spec) > 2 or (len(spec) == 2 and not isinstance(spec[0], (list, tuple))):
        raise BuildError("build takes (schedule, target) or, as TVM spells it, (schedule, "
                         f"args, target); got {len(spec) + 1} positional arguments")
    if spec and isinstance(spec[0], (list, tuple)):
        check_args(sch_or_func, spec[0])
        spec = spec[1:]
    if spec:
        if target is not None:
            raise BuildError("build got the target twice (positional and target=)")
        target = spec[0]
    return "cpu" if target is None else target


def check_args(sch_or_func, tensors) -> None:
    """BuildError unless `tensors` (te tensors, TVM's `args`) are the parameters of the
    function in order: a kernel is called with its arrays in that order."""
    func = unpack(sch_or_func)[1]
    bufs = [getattr(t, "buffer", t) for t in tensors]
    if len(bufs) == len(func.params) and all(
            b is p or (getattr(b, "name", None) == p.name and tuple(b.shape) == tuple(p.shape))
            for b, p in zip(bufs, func.params)):
        return
    want = ", ".join(p.name for p in func.params)
    got = ", ".join(str(getattr(b, "name", b)) for b in bufs)
    raise BuildError(f"args ({got}) are not the parameters of {func.name} ({want}); pass the "
                     "tensors the workload function returned, in that order")


def build(sch_or_func, *spec, target=None, num_threads: int | None = None, flags=None,
          timeout: float | None = None):
    """Lower, render, compile (cached) and load: `build(sch, target)`, or TVM's `build(sch,
    args, target)` (args: the te tensors, checked against the parameters). `target`: "cpu"
    (this machine, the default), a Target or a TVM target string; a module for an ISA this
    machine lacks is refused (BuildError naming what is missing: generate_source makes its C).
    `num_threads` sets the module's thread count for parallel loops (default: OpenMP's, i.e.
    all cores). On a cuda target the result is a CudaModule (runtime/cuda.py; `flags` are
    compiler options, `num_threads` is ignored), and a BuildError says so when no GPU can be
    used here. The module's `artifact` says what was compiled, and for which ISA."""
    target = _split_spec(sch_or_func, spec, target)
    return Backend.for_target(target).build(sch_or_func, num_threads=num_threads, flags=flags,
                                            timeout=timeout)


def lower(sch_or_func, args=None, *, target="cpu", simple_mode: bool = True) -> PrimFunc:
    """The loops a schedule lowers to for `target` (blocks become loops, buffers compacted,
    unroll marks placed; print it to read it). TVM's `lower(sch, args, simple_mode=True)`:
    `args` are checked as build checks them; `simple_mode` is accepted (the output is always
    the short form)."""
    if args is not None:
        check_args(sch_or_func, args)
    return Backend.for_target(target).lower_loops(sch_or_func)
