"""Postprocessors finish a sampled schedule (turning annotations into loop kinds) and reject
invalid ones: `apply(sch)` returns False to reject."""
from __future__ import annotations

from ..registry import Registry


class Postproc:
    registry = Registry("postprocessor")

    @classmethod
    def create(cls, spec, **kwargs) -> "Postproc":
        return cls.registry.create(spec, Postproc, **kwargs)

    def initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch) -> bool:
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}()"
