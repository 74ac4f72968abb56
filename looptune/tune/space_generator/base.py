"""Space generators turn a workload into its design space: schedules whose traces hold the
sampling instructions the search fills in."""
from __future__ import annotations

from ..registry import Registry


class SpaceGenerator:
    """The interface of a space generator: `generate_design_space`. The base turns `sch_rules`
    and `postprocs` ("default": the target's, from tune/defaults.py, or names / instances) into
    initialized objects when the task is set up."""

    registry = Registry("space generator")

    @classmethod
    def create(cls, spec="post-order-apply", **kwargs) -> "SpaceGenerator":
        """A space generator from its registered name, class or instance."""
        return cls.registry.create(spec, SpaceGenerator, **kwargs)

    def __init__(self, sch_rules="default", postprocs="default"):
        self.sch_rules = sch_rules
        self.postprocs = postprocs

    def initialize_with_tune_context(self, context) -> None:
        """Create this task's rules and postprocessors (the target's defaults for "default") and
        initialize each with `context`."""
        from ..defaults import default_postprocs, default_rules
        from ..postproc.base import Postproc
        from ..schedule_rule.base import ScheduleRule
        rules = default_rules(context.target) if self.sch_rules == "default" else self.sch_rules
        posts = default_postprocs(context.target) if self.postprocs == "default" else self.postprocs
        self.sch_rules = [ScheduleRule.create(r) for r in rules]
        self.postprocs = [Postproc.create(p) for p in posts]
        for x in (*self.sch_rules, *self.postprocs):
            x.initialize_with_tune_context(context)

    def generate_design_space(self, func, seed: int) -> list:
        """The design space of `func`: a non-empty list of Schedules whose traces hold the
        sampling instructions the search fills in (seeded with `seed`)."""
        raise NotImplementedError
