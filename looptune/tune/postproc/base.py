"""Postprocessors finish a sampled schedule (turning annotations into loop kinds) and reject
invalid ones: `apply(sch)` returns False to reject."""
from __future__ import annotations

from ..registry import Registry


class Postproc:
    """The interface of a postprocessor: `apply`, optionally `initialize_with_tune_context`;
    register with `@Postproc.registry.register("name")`. They run in order on every sampled
    schedule, after its decisions are final."""

    registry = Registry("postprocessor")

    @classmethod
    def create(cls, spec, **kwargs) -> "Postproc":
        """A postprocessor from its registered name, class or instance."""
        return cls.registry.create(spec, Postproc, **kwargs)

    def initialize_with_tune_context(self, context) -> None:
        """Read what the postprocessor needs from the task (target, ...) before the first apply;
        the default needs nothing."""
        pass

    def apply(self, sch) -> bool:
        """Finish `sch` in place (its postprocessing part of the trace) and return True, or
        return False to reject the schedule (raising ScheduleError rejects it too). `sch` is the
        search's own copy; it is measured only if every postprocessor keeps it."""
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}()"
