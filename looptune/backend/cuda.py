"""The CUDA backend: a function bound to GPU threads is lowered to a GpuProgram (kernels,
shared tiles, barriers), rendered as CUDA C, compiled by NVRTC (or nvcc) into a cubin, and
described beside it in JSON (launch table, arguments, intermediates): the artifact a
CudaModule loads, in this process or a runner's worker. Compiling needs no GPU."""
from __future__ import annotations

import json
import time
from pathlib import Path

from ..codegen.cuda import launch_table, render_cuda
from ..codegen.gpu import lower_gpu
from ..runtime.compiler import _atomic_write
from ..runtime.cuda_compile import ARTIFACT_FORMAT, compile_cuda, cuda_compiler
from .base import Artifact, Backend, Source, args_info


def intermediates_of(program) -> list:
    """The global buffers a program's kernels pass between them, as CudaModule takes them."""
    return [{"name": b.name, "dtype": b.dtype, "size": b.size} for b in program.intermediates]


def compile_program(program, source: str, args, *, arch: str, name: str,
                   compiler: str = "auto", options=(), timeout: float | None = None) -> Path:
    """Compile a GpuProgram's source and describe it beside the cubin: the JSON artifact
    (image, launch table, arguments, intermediates) that `CudaModule.load` opens."""
    image = compile_cuda(source, arch=arch, name=name, compiler=compiler, options=options,
                         timeout=timeout)
    desc = {"format": ARTIFACT_FORMAT, "image": image.name, "arch": arch,
            "compiler": cuda_compiler(compiler)[1],
            "kernels": [k.to_json() for k in launch_table(program)],
            "args": [a.to_json() for a in args],
            "intermediates": intermediates_of(program)}
    path = image.with_suffix(".json")
    _atomic_write(path, json.dumps(desc, indent=1))
    return path


def require_gpu() -> None:
    """CudaUnavailable (a BuildError) saying why, unless a CUDA GPU can be used here."""
    from ..runtime.cuda import CudaUnavailable, gpu_available
    ok, why = gpu_available()
    if not ok:
        raise CudaUnavailable(f"build(target='cuda') needs an NVIDIA GPU and its driver "
                              f"({why.rstrip('.')}); generate_source(sch, 'cuda') gives "
                              "the CUDA C without one")


@Backend.registry.register("cuda")
class CUDABackend(Backend):
    """`compiler`: "auto" (NVRTC if cuda-python has it, else nvcc), "nvrtc" or "nvcc"."""

    kind = "cuda"

    def __init__(self, target, *, compiler: str = "auto"):
        super().__init__(target)
        self.compiler = compiler

    def _lower_loops(self, func):
        from ..codegen.gpu.lower import lower_gpu_loops
        return lower_gpu_loops(func, self.target.vector_bits)

    def lower(self, func, *, loops=None):
        """The GpuProgram of a function whose loops are bound to blockIdx / threadIdx (a
        BuildError names a loop nest that is not)."""
        return lower_gpu(func, self.target)

    def render(self, func, lowered, *, meta=None) -> Source:
        return Source(func, render_cuda(lowered, meta=meta), func.name, lowered)

    def compile(self, source: Source, *, flags=None, timeout=None) -> Artifact:
        path = compile_program(source.lowered, source.text, args_info(source.func),
                              arch=self.target.arch, name=source.func.name,
                              compiler=self.compiler, options=flags or (), timeout=timeout)
        return Artifact("cuda", str(path), source.symbol, self.target.isa())

    def load(self, artifact: Artifact, args, *, source: str = ""):
        """A CudaModule; CudaUnavailable (a BuildError) when no GPU can be used here."""
        from ..runtime.cuda import CudaModule
        require_gpu()
        mod = CudaModule.load(artifact.path)
        mod.artifact = artifact
        return mod

    def build(self, sch_or_func, *, name=None, num_threads=None, flags=None, timeout=None,
              threads_from=None):
        """As Backend.build; `num_threads` is ignored (a GPU launch says its threads), and a
        missing GPU is reported before anything is compiled (after lowering)."""
        t0 = time.perf_counter()
        source = self.generate(sch_or_func, name=name)  # what cannot be lowered says so first
        require_gpu()
        artifact = self.compile(source, flags=flags, timeout=timeout)
        mod = self.load(artifact, args_info(source.func), source=source.text)
        mod.build_secs = time.perf_counter() - t0
        return mod
