"""Schedule rules: given a schedule and a block, return the schedules the rule makes of it
(one, several for a branching rule, or the input unchanged when the rule does not apply)."""
from __future__ import annotations

from ..registry import Registry


class ScheduleRule:
    registry = Registry("schedule rule")

    @classmethod
    def create(cls, spec, **kwargs) -> "ScheduleRule":
        return cls.registry.create(spec, ScheduleRule, **kwargs)

    def initialize_with_tune_context(self, context) -> None:
        """Read what the rule needs from the task (target, ...) before the first apply."""

    def apply(self, sch, block) -> list:
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}()"
