"""Builders: scheduled functions -> compiled shared libraries, many at a time."""
from .base import Builder, BuilderInput, BuilderResult
from .local import LocalBuilder
from .cuda import CudaBuilder  # noqa: E402  (registers "cuda"; CUDA itself is imported lazily)
from .ray import RayBuilder  # registers "ray"; Ray itself is imported when it first builds

__all__ = ["Builder", "BuilderInput", "BuilderResult", "CudaBuilder", "LocalBuilder", "RayBuilder"]
