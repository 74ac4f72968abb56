"""Schedule rules: given a schedule and a block, return the schedules the rule makes of it
(one, several for a branching rule, or the input unchanged when the rule does not apply)."""
from __future__ import annotations

from ..registry import Registry


class ScheduleRule:
    """The interface of a schedule rule: `apply` one block, optionally
    `initialize_with_tune_context`; register with `@ScheduleRule.registry.register("name")`.
    Rules run in order on every block, consumers first and the root last
    (space_generator.PostOrderApply); defaults per target are in tune/defaults.py."""

    registry = Registry("schedule rule")

    @classmethod
    def create(cls, spec, **kwargs) -> "ScheduleRule":
        """A rule from its registered name ("multi-level-tiling"), class or instance."""
        return cls.registry.create(spec, ScheduleRule, **kwargs)

    def initialize_with_tune_context(self, context) -> None:
        """Read what the rule needs from the task (target, ...) before the first apply."""

    def apply(self, sch, block) -> list:
        """The schedules this rule makes of `sch` at `block` (a BlockRV of sch): a non-empty
        list. `[sch]` leaves the block as it is (the rule does not apply) or holds sch changed
        in place; a branching rule returns copies (`sch.copy()`) too. Choices the search should
        make are sampling instructions (sample_perfect_tile, ...), never Python randomness, so
        the trace records them as decisions. A primitive that refuses raises ScheduleError; the
        rule catches it (returning what it could make), since the space generator does not."""
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}()"
