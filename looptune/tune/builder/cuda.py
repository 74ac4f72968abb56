"""CudaBuilder: the LocalBuilder for cuda targets (their Backend lowers a GPU schedule,
renders CUDA C and compiles it with NVRTC or nvcc into the artifact CudaRunner loads).
Compiling needs no GPU, so a CUDA build farm can be a CPU machine with the compilers."""
from __future__ import annotations

from .base import Builder
from .local import LocalBuilder


@Builder.registry.register("cuda")
class CudaBuilder(LocalBuilder):
    """`compiler` is "auto" (NVRTC if cuda-python has it, else nvcc), "nvrtc" or "nvcc"."""

    kind = "cuda"

    def __init__(self, *, max_workers: int | None = None, timeout_s: float = 60.0,
                 compiler: str = "auto"):
        super().__init__(max_workers=max_workers, timeout_s=timeout_s)
        self.compiler = compiler
        self.backend_options = {"compiler": compiler}
