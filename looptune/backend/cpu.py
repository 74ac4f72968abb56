"""The CPU backend: C with OpenMP and SIMD from codegen's C renderer, compiled by the system
C compiler into a shared library (through an object file, which a model links as it is),
loaded with ctypes. Compiler flags follow the Target: `-march=native` when the Target's ISA
is this machine's, else the Target's own ISA extensions (so a kernel built for an AVX2
target has no AVX-512 in it, whatever the host); either way tuned for no CPU in particular
(`-mtune=generic`, see isa_flags)."""
from __future__ import annotations

from ..codegen import CRenderer, finish_lowering, lower_loops
from ..codegen.passes.tensorize import intrinsics_used
from ..env import cc as default_cc
from ..error import BuildError
from ..runtime.compiler import CFLAGS, compile_library, compile_shared, object_of, \
    workaround_flags
from ..runtime.module import Module
from ..target import host
from ..tir.functor import visit
from ..target.target import detected
from .base import Artifact, Backend, Source

# /proc/cpuinfo's name of an x86 extension -> GCC's -m option for it
GCC_X86 = {
    "sse": "sse", "sse2": "sse2", "pni": "sse3", "ssse3": "ssse3", "sse4_1": "sse4.1",
    "sse4_2": "sse4.2", "popcnt": "popcnt", "aes": "aes", "pclmulqdq": "pclmul",
    "movbe": "movbe", "abm": "lzcnt", "bmi1": "bmi", "bmi2": "bmi2", "adx": "adx",
    "f16c": "f16c", "fma": "fma", "avx": "avx", "avx2": "avx2", "avx_vnni": "avxvnni",
    "avx512f": "avx512f", "avx512cd": "avx512cd", "avx512bw": "avx512bw",
    "avx512dq": "avx512dq", "avx512vl": "avx512vl", "avx512ifma": "avx512ifma",
    "avx512vbmi": "avx512vbmi", "avx512_vbmi2": "avx512vbmi2", "avx512_vnni": "avx512vnni",
    "avx512_bitalg": "avx512bitalg", "avx512_vpopcntdq": "avx512vpopcntdq",
    "avx512_bf16": "avx512bf16", "avx512_fp16": "avx512fp16", "gfni": "gfni", "vaes": "vaes",
    "vpclmulqdq": "vpclmulqdq", "sha_ni": "sha", "amx_tile": "amx-tile",
    "amx_bf16": "amx-bf16", "amx_int8": "amx-int8",
}


def has_guarded_loads(node) -> bool:
    """Whether lowered code reads a buffer under a condition (a select's arm, an if's body,
    the right side of C's short-circuit && and ||): what GCC's if-conversion bug needs
    (runtime.compiler.workaround_flags)."""
    from ..tir.expr import Binary, BufferLoad, Select
    from ..tir.stmt import IfThenElse
    found = []

    def loads(n):
        if found:
            return False
        if isinstance(n, BufferLoad):
            found.append(n)
        return None

    def fn(n):
        if found:
            return False
        if isinstance(n, Select):
            visit(n.true_value, loads)
            visit(n.false_value, loads)
        elif isinstance(n, Binary) and n.op in ("and", "or"):
            visit(n.b, loads)
        elif isinstance(n, IfThenElse):
            visit(n.then_case, loads)
            if n.else_case is not None:
                visit(n.else_case, loads)
        return None

    visit(node, fn)
    return bool(found)


def isa_flags(target) -> list:
    """The compiler flags that select the Target's ISA, with GCC's generic tuning: tuned for
    the host instead (what -march=native alone means), GCC folds the loads of a register
    tile's B vectors into its FMAs where the tile leaves no register spare. On an AVX2 target
    (16 vector registers) a 3x32 tile then loads 15 vectors per 12 FMAs instead of 9:
    tuned for a Zen 3 (the host tuning of an AVX2 EPYC) the best matmul_add 1024 of 256 trials
    ran at 0.70x numpy, tuned generically at 0.91x (the same search, Zen 4 as AVX2); with
    AVX-512 generic tuning measured the same as the host's (benchmarks/compile_options.py)."""
    if target.same_isa(detected()):
        return ["-march=native", "-mtune=generic"]  # this machine's ISA
    if target.arch == "x86_64":
        return ["-march=x86-64", "-mtune=generic"] + [
            f"-m{GCC_X86[f]}" for f in target.isa_features() if f in GCC_X86]
    if target.arch == "aarch64":
        return ["-march=armv8-a"]
    raise BuildError(f"building C for {target} on a {host().arch} host is not supported; "
                     "build for this machine (target='cpu')")


@Backend.registry.register("cpu")
class CPUBackend(Backend):
    """The Backend of target kind "cpu" (module docstring): C with OpenMP, built with the
    Target's ISA flags."""

    kind = "cpu"

    def _lower_loops(self, func):
        return lower_loops(func, vector_bits=self.target.vector_bits)

    def lower(self, func, *, loops=None, vectorize: bool = True):
        """The flat, vectorized loop program (`vectorize=False`: scalar, for the
        interpreter)."""
        loops = self.lower_loops(func) if loops is None else loops
        lowered = finish_lowering(loops, vectorize=vectorize, vector_bits=self.target.vector_bits)
        for intrin in intrinsics_used(lowered.body):
            if not intrin.offered_by(self.target):
                lacks = [f for f in intrin.requires if not self.target.has(f)]
                offered = ", ".join(self.target.tensor_intrins()) or "none"
                raise BuildError(f"{func.name} is tensorized with {intrin.name}, which needs "
                                 f"{', '.join(lacks)}: {self.target} lacks it; tensorize with "
                                 f"one of the target's intrinsics ({offered})")
        return lowered

    def render(self, func, lowered, *, meta=None) -> Source:
        return Source(func, CRenderer().render(lowered, meta=meta), CRenderer.symbol(func),
                      guarded_loads=has_guarded_loads(lowered))

    def flags(self, cc: str | None = None, *, guarded_loads: bool = True) -> list:
        """The C compiler's flags for this target: CFLAGS with the Target's ISA, and the
        compiler's workarounds for code with loads under conditions (without them: none, so
        that GCC if-converts and vectorizes the rest, a NaN-aware clip among them)."""
        cc = cc or default_cc()
        return [f for f in CFLAGS if not f.startswith(("-march=", "-mtune="))] \
            + isa_flags(self.target) \
            + (workaround_flags(cc) if guarded_loads else [])

    def compile(self, source: Source, *, flags=None, timeout=None) -> Artifact:
        path = compile_shared(source.text, name=source.func.name, timeout=timeout,
                              flags=self.flags(guarded_loads=source.guarded_loads)
                              if flags is None else flags,
                              isa=self.target.isa())
        return Artifact("cpu", str(path), source.symbol, self.target.isa(),
                        str(object_of(path)))

    def load(self, artifact: Artifact, args, *, source: str = "") -> Module:
        mod = Module(artifact.path, artifact.symbol, list(args), source,
                     object_of(artifact.path).with_suffix(".c"))
        mod.artifact = artifact
        return mod

    def link(self, units, *, name: str, objects=(), data_files=None, jobs=None,
             timeout=None):
        """One shared library of C (or assembly) `units` (file name, text, extra flags),
        compiled for this target, and `objects` compiled before (kernels' Artifact
        object_path): a model, or a batch of fuzzed kernels."""
        return compile_library(list(units), name=name, objects=objects, data_files=data_files,
                               jobs=jobs, timeout=timeout, flags=self.flags(),
                               isa=self.target.isa())
