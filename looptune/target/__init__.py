"""The machine code is compiled for."""
from . import cuda_device
from .target import Target, TargetError, cuda_target, host

__all__ = ["Target", "TargetError", "cuda_device", "cuda_target", "host"]
