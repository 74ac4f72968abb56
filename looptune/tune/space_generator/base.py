"""Space generators turn a workload into its design space: schedules whose traces hold the
sampling instructions the search fills in."""
from __future__ import annotations

from ..registry import Registry


class SpaceGenerator:
    registry = Registry("space generator")

    @classmethod
    def create(cls, spec="post-order-apply", **kwargs) -> "SpaceGenerator":
        return cls.registry.create(spec, SpaceGenerator, **kwargs)

    def __init__(self, sch_rules="default", postprocs="default"):
        self.sch_rules = sch_rules
        self.postprocs = postprocs

    def initialize_with_tune_context(self, context) -> None:
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
        raise NotImplementedError
