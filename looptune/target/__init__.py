"""The machine code is compiled for."""
from .target import Target, TargetError, cuda_target, host

__all__ = ["Target", "TargetError", "cuda_target", "host"]
