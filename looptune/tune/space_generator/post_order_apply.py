"""PostOrderApply: apply every rule to every block, consumers before producers and the root
last, each rule turning each schedule so far into one or more."""
from __future__ import annotations

from ...schedule import Schedule
from ...tir.functor import collect_realizes
from ..error import TuneError
from .base import SpaceGenerator


def blocks_consumers_first(func) -> list:
    names = [br.block.name for br in collect_realizes(func.root.body)]
    return names[::-1] + ["root"]


@SpaceGenerator.registry.register("post-order-apply")
class PostOrderApply(SpaceGenerator):
    """The default space generator: every rule on every block, consumers before producers and
    the root last; a rule that branches multiplies the design spaces."""

    def generate_design_space(self, func, seed: int) -> list:
        schs = [Schedule(func, seed=seed)]
        for name in blocks_consumers_first(func):
            for rule in self.sch_rules:
                nxt = []
                for sch in schs:
                    if not sch.has_block(name):  # inlined by an earlier rule
                        nxt.append(sch)
                        continue
                    got = rule.apply(sch, sch.get_block(name))
                    if not isinstance(got, (list, tuple)) or not got:
                        raise TuneError(
                            f"schedule rule {type(rule).__name__} returned {got!r} for block "
                            f"{name!r} of {func.name}: a rule returns a non-empty list of "
                            "schedules (`[sch]` to leave the block as it is)")
                    nxt.extend(got)
                schs = nxt
        return schs


@SpaceGenerator.registry.register("schedule-fn")
class ScheduleFn(SpaceGenerator):
    """A design space written by hand: `fn(sch)` schedules (and samples) in place."""

    def __init__(self, fn, sch_rules=(), postprocs="default"):
        super().__init__(sch_rules=list(sch_rules), postprocs=postprocs)
        self.fn = fn

    def generate_design_space(self, func, seed: int) -> list:
        sch = Schedule(func, seed=seed)
        result = self.fn(sch)
        if isinstance(result, list):
            return result
        return [sch]
