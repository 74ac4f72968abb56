"""Backend: the one path from a scheduled function to code that runs on a target kind,
in four steps: `lower` (loops, buffers and vectors as the target wants them), `render`
(source text), `compile` (an artifact on disk, cached under a key that holds the source, the
compiler and its version, the flags and the target's ISA fingerprint) and `load` (a callable
module; an artifact built for an ISA this machine lacks is refused). `build` does all four.

`looptune.build`, the tuner's builder, the reference build of a tuning task, the model
compiler and the fuzzer all go through a Backend; adding a target is one Backend subclass
(registered under its Target kind) and one Target kind."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..error import BuildError
from ..registry import Registry
from ..runtime.limits import memory_problem
from ..runtime.module import ArgInfo
from ..schedule import Schedule
from ..target import Target
from ..tir.func import PrimFunc
from ..tir.functor import visit
from ..tir import dtype as dt
from ..tir.expr import BufferLoad
from ..tir.stmt import BufferStore
from ..tir.structural import structural_hash


@dataclass(frozen=True, eq=False)
class Source:
    """Rendered code of one function, ready to compile."""

    func: PrimFunc        # the scheduled function it was rendered from (its name names the kernel)
    text: str             # C, or CUDA C
    symbol: str           # the entry point (`<symbol>_packed` on a CPU)
    lowered: object = field(default=None, repr=False)  # what lowering made (a GpuProgram on
                                                       # CUDA: its launch table goes with it)
    guarded_loads: bool = True  # C: a load under a condition (backend.cpu: the compiler
                                # workaround it needs); True unless the renderer knows


@dataclass(frozen=True)
class Artifact:
    """A compiled kernel on disk: plain data, so it can cross to a runner's process."""

    kind: str                       # the target kind it was built for
    path: str                       # CPU: the shared library; CUDA: the JSON beside the cubin
    symbol: str
    isa: dict                       # Target.isa() of what it was built for
    object_path: str | None = None  # CPU: the object the library was linked from


def written_params(func: PrimFunc) -> set:
    out = set()

    def fn(n):
        if isinstance(n, BufferStore):
            out.add(n.buffer)
    visit(func.body, fn)
    return out


def check_fits(func: PrimFunc) -> None:
    """BuildError if the buffers of `func` cannot exist (a size beyond int64) or cannot all
    fit in this machine's memory at once (runtime.limits)."""
    problem = memory_problem(f"the kernel {func.name}", [(b.name, b.shape, b.dtype) for b in func.params])
    if problem:
        raise BuildError(problem)


def args_info(func: PrimFunc) -> tuple:
    """The ArgInfo of each parameter of `func` (name, shape, dtype, whether it is written,
    the size of the axes it indexes)."""
    written, bounds = written_params(func), index_bounds(func)
    return tuple(ArgInfo(b.name, b.shape, b.dtype, b in written, bounds.get(b, 0))
                 for b in func.params)


def index_bounds(func: PrimFunc) -> dict:
    """{integer parameter: the smallest axis an index loaded from it addresses} (A[I[i]]
    gives I the size of A's axis 0): random inputs below it are valid indices."""
    params = {b for b in func.params if dt.is_int(b.dtype)}
    out: dict = {}

    def fn(n):
        if isinstance(n, (BufferLoad, BufferStore)):
            for idx, size in zip(n.indices, n.buffer.shape):
                visit(idx, lambda m: out.__setitem__(m.buffer, min(out.get(m.buffer, size),
                                                                   int(size)))
                      if isinstance(m, BufferLoad) and m.buffer in params else None)
    visit(func.body, fn)
    return out


def unpack(sch_or_func) -> tuple:
    """(scheduled function, unscheduled function, trace length) of a Schedule or PrimFunc."""
    if isinstance(sch_or_func, Schedule):
        return sch_or_func.func, sch_or_func.original, len(sch_or_func.trace)
    if isinstance(sch_or_func, PrimFunc):
        return sch_or_func, sch_or_func, 0
    raise TypeError(f"build needs a Schedule or a PrimFunc, got {type(sch_or_func).__name__}")


def renamed(func: PrimFunc, name: str | None) -> PrimFunc:
    """`func` under another name (the kernel's symbol comes from it)."""
    return func if name is None or name == func.name else \
        type(func)(name, func.params, func.body, func.attrs)


class Backend:
    """The four steps for one Target. Subclasses set `kind` and implement them."""

    registry = Registry("backend", error=BuildError,
                        hint=" (a target kind needs a Backend registered under its name)")
    kind = ""

    def __init__(self, target: Target):
        self.target = target

    @staticmethod
    def for_target(target="cpu", **options) -> "Backend":
        """The Backend of a Target (or of anything Target.create takes)."""
        target = Target.create(target)
        cls = Backend.registry.lookup(target.kind, where=f"building for {target}: ")
        return cls(target, **options)

    # ------------------------------------------------------------------ the four steps
    def lower_loops(self, sch_or_func) -> PrimFunc:
        """Stage 1 of lowering (blocks to loops, compacted buffers, unroll marks): what
        verification and cost-model features read. Of a Schedule, computed once per state."""
        if isinstance(sch_or_func, Schedule):
            return sch_or_func.memo(("lower_loops", self.target.isa_fingerprint(),
                                     self.target.vector_bits), self._lower_loops)
        return self._lower_loops(sch_or_func)

    def _lower_loops(self, func: PrimFunc) -> PrimFunc:
        raise NotImplementedError

    def lower(self, func: PrimFunc, *, loops: PrimFunc | None = None):
        """The lowered program the renderer prints; `loops`: its stage 1, if known."""
        raise NotImplementedError

    def render(self, func: PrimFunc, lowered, *, meta: dict | None = None) -> Source:
        """The source text of `lowered` (this backend's lower of `func`), with `meta` as its
        header comment; a Source names the kernel's entry point."""
        raise NotImplementedError

    def compile(self, source: Source, *, flags=None, timeout: float | None = None) -> Artifact:
        """An Artifact built from `source` (a cached one when the same source and flags were
        built before); BuildError when the compiler fails or runs past `timeout`."""
        raise NotImplementedError

    def load(self, artifact: Artifact, args, *, source: str = ""):
        """A callable module; BuildError if the artifact's ISA is not this machine's."""
        raise NotImplementedError

    # ------------------------------------------------------------------ compositions
    def meta(self, sch_or_func, func: PrimFunc) -> dict:
        """The header of generated code: workload hash, target, trace length."""
        _, original, trace_len = unpack(sch_or_func)
        return {"workload": structural_hash(original), "target": str(self.target),
                "trace": f"{trace_len} instructions"}

    def generate(self, sch_or_func, *, name: str | None = None, loops=None,
                 meta: dict | None = None) -> Source:
        """Lower and render (no compiler needed): the Source of a Schedule or PrimFunc,
        named `name` (default: the function's)."""
        func = renamed(unpack(sch_or_func)[0], name)
        meta = self.meta(sch_or_func, func) if meta is None else meta
        return self.render(func, self.lower(func, loops=loops), meta=meta)

    def build(self, sch_or_func, *, name: str | None = None, num_threads: int | None = None,
              flags=None, timeout: float | None = None,
              threads_from: str = "the num_threads argument"):
        """Lower, render, compile (cached) and load; `threads_from` says where num_threads
        came from (for the messages of Module.set_num_threads). Buffers that cannot fit in
        this machine's memory are refused first (BuildError)."""
        check_fits(unpack(sch_or_func)[0])
        source = self.generate(sch_or_func, name=name)
        artifact = self.compile(source, flags=flags, timeout=timeout)
        mod = self.load(artifact, args_info(source.func), source=source.text)
        mod.packed_params = source.func.attr("packed_params", ())
        if num_threads is not None:
            mod.set_num_threads(num_threads, source=threads_from)
        return mod

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.target})"
