"""Builders: scheduled functions -> compiled shared libraries, many at a time."""
from .base import Builder, BuilderInput, BuilderResult
from .local import LocalBuilder

__all__ = ["Builder", "BuilderInput", "BuilderResult", "LocalBuilder"]
