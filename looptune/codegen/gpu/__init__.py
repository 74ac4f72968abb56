"""GPU lowering: a thread-bound PrimFunc -> a GpuProgram of kernels."""
from .lower import is_gpu_func, lower_gpu, split_kernels
from .program import BLOCK_TAGS, THREAD_TAGS, GpuProgram, Kernel

__all__ = ["BLOCK_TAGS", "GpuProgram", "Kernel", "THREAD_TAGS", "is_gpu_func", "lower_gpu",
           "split_kernels"]
