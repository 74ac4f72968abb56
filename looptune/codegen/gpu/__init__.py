"""GPU lowering: a thread-bound PrimFunc -> a GpuProgram of kernels."""
from .lower import is_gpu_func, lower_gpu, split_kernels
from .program import BLOCK_TAGS, THREAD_TAGS, GpuProgram, Kernel
from ...tir.interpreter_gpu import set_gpu_lowering


def _for_interpreter(func, lowered: bool) -> GpuProgram:
    """What the interpreter runs of a GPU-bound function: a lowered one (codegen.lower) only
    split into kernels; the others lowered without vectors (the interpreter runs scalars)."""
    return split_kernels(func) if lowered else lower_gpu(func, "cuda", vectorize=False)


set_gpu_lowering(_for_interpreter)

__all__ = ["BLOCK_TAGS", "GpuProgram", "Kernel", "THREAD_TAGS", "is_gpu_func", "lower_gpu",
           "split_kernels"]
