"""The machine code is compiled for."""
from .target import Target, cuda_target, host

__all__ = ["Target", "cuda_target", "host"]
