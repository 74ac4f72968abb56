"""CudaBuilder: lower a GPU schedule (codegen.gpu.lower_gpu), render CUDA C, and compile it
(NVRTC, or nvcc) into the artifact CudaRunner loads: a JSON description beside the cubin.
Compiling needs no GPU, so a CUDA build farm can be a CPU machine with the compilers."""
from __future__ import annotations

import time

from ...build import args_info
from ...codegen.cuda import render_cuda
from ...codegen.gpu import lower_gpu
from ...runtime.cuda_compile import compile_program
from ...runtime.error import BuildError
from .base import Builder, BuilderInput
from .local import LocalBuilder


@Builder.registry.register("cuda")
class CudaBuilder(LocalBuilder):
    """`compiler` is "auto" (NVRTC if cuda-python has it, else nvcc), "nvrtc" or "nvcc"."""

    def __init__(self, *, max_workers: int | None = None, timeout_s: float = 60.0,
                 compiler: str = "auto"):
        super().__init__(max_workers=max_workers, timeout_s=timeout_s)
        self.compiler = compiler
        self._programs: dict = {}  # source -> (program, args, arch): what _compile needs

    def render(self, inp: BuilderInput) -> tuple[str, str]:
        if inp.target.kind != "cuda":
            raise BuildError(f"CudaBuilder builds for cuda targets, not {inp.target.kind}; use "
                             "builder='local'")
        program = lower_gpu(inp.func, inp.target)
        source = render_cuda(program, meta=inp.meta)
        self._programs[source] = (program, args_info(inp.func), inp.target.arch)
        return inp.func.name, source

    def _compile(self, source: str, name: str) -> dict:
        t0 = time.perf_counter()
        program, args, arch = self._programs.pop(source)
        try:
            path = compile_program(program, source, args, arch=arch, name=name,
                                   compiler=self.compiler, timeout=self.timeout_s)
        except BuildError as e:
            return {"error_class": "build_timeout" if e.timed_out else "build_error",
                    "error_msg": str(e), "secs": time.perf_counter() - t0}
        return {"path": str(path), "secs": time.perf_counter() - t0}
