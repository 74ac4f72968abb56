"""Builders compile scheduled functions into loadable artifacts, many at a time."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...target import Target
from ...tir.func import PrimFunc
from ..registry import Registry


@dataclass(frozen=True, eq=False)
class BuilderInput:
    """One scheduled function to compile for a target."""

    func: PrimFunc                 # the scheduled function
    target: Target
    meta: dict = field(default_factory=dict)  # header info: workload hash, trace length
    lowered: PrimFunc | None = None  # its stage-1 lowering (codegen.lower_loops), if known


@dataclass(frozen=True)
class BuilderResult:
    """The artifact built from one BuilderInput, or why it could not be built (`error_class`,
    `error_msg`)."""

    artifact: str | None = None    # path of the shared library
    symbol: str | None = None      # the kernel's C name (call `<symbol>_packed`)
    source_hash: str | None = None # sha256 of the C source: identical binaries share it
    error_class: str | None = None # "build_error" or "build_timeout"
    error_msg: str | None = None
    build_secs: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error_class is None


class Builder:
    """The interface of a builder: `build`; register with `@Builder.registry.register("name")`.
    Failures are results, never exceptions, so one bad candidate does not stop a batch."""

    registry = Registry("builder")

    @classmethod
    def create(cls, spec="local", **kwargs) -> "Builder":
        """A builder from its registered name ("local", "cuda"), class or instance."""
        return cls.registry.create(spec, Builder, **kwargs)

    def build(self, inputs: list) -> list:
        """One BuilderResult per BuilderInput, in order; failures are results, not raises."""
        raise NotImplementedError
