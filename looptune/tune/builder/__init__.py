"""Builders: scheduled functions -> compiled shared libraries, many at a time."""
from .base import Builder, BuilderInput, BuilderResult
from .local import LocalBuilder
from .cuda import CudaBuilder  # noqa: E402  (registers "cuda"; CUDA itself is imported lazily)

__all__ = ["Builder", "BuilderInput", "BuilderResult", "CudaBuilder", "LocalBuilder"]
