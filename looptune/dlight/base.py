"""The DLight rule interface: a Rule schedules a whole PrimFunc of one kind (a matmul, a row
reduction, ...) with no search, or says it does not apply. Rules are registered by name; the
rules each target kind tries, in order, are data (DEFAULT_RULES)."""
from __future__ import annotations

from ..registry import Registry
from ..schedule import Schedule, ScheduleError
from ..tir.func import PrimFunc

# per target kind, the rules default_schedule tries in order (the first that applies wins;
# the last always applies)
DEFAULT_RULES = {
    "cpu": ("cpu-default",),
    "cuda": ("gpu-matmul", "gpu-conv", "gpu-reduction", "gpu-general-reduction", "gpu-elementwise",
             "gpu-fallback"),
}


class Rule:
    """The interface of a default-schedule rule: `apply`; register with
    `@Rule.registry.register(name)` and list it in DEFAULT_RULES."""

    registry = Registry("dlight rule", error=ValueError,
                        hint="; register one with @Rule.registry.register(name)")

    @classmethod
    def create(cls, spec, **kwargs) -> "Rule":
        """A rule from its registered name ("gpu-matmul"), class or instance."""
        return cls.registry.create(spec, Rule, **kwargs)

    def apply(self, func_or_sch, target) -> Schedule | None:
        """A schedule of the whole function, or None where the rule does not apply. A step
        that does not apply may also raise ScheduleError: the next rule is tried."""
        raise NotImplementedError

    @property
    def name(self) -> str:
        """The registered name (the class name of an unregistered rule)."""
        return getattr(type(self), "registered_name", type(self).__name__)

    def __repr__(self):
        return f"{type(self).__name__}()"


def rules_for(target) -> list:
    """The Rule instances `target`'s kind tries, in order."""
    names = DEFAULT_RULES.get(target.kind)
    if names is None:
        raise ValueError(f"no default schedule rules for target kind {target.kind!r}; the kinds "
                         f"with rules are {', '.join(DEFAULT_RULES)}")
    return [Rule.create(n) for n in names]


def start(func_or_sch) -> Schedule:
    """The schedule a rule works on: a fresh one (seed 0) of a PrimFunc, or a copy of a
    Schedule, so a rule that gives up part way leaves the caller's untouched."""
    if isinstance(func_or_sch, Schedule):
        return func_or_sch.copy()
    if isinstance(func_or_sch, PrimFunc):
        return Schedule(func_or_sch, seed=0)
    raise TypeError(f"a default schedule needs a PrimFunc or a Schedule, got "
                    f"{type(func_or_sch).__name__}")


def try_(prim, *args):
    """prim(*args), or None where the primitive does not apply."""
    try:
        return prim(*args)
    except ScheduleError:
        return None


def ok(prim, *args) -> bool:
    try:
        prim(*args)
        return True
    except ScheduleError:
        return False


def block_names(sch) -> list:
    """The names of the blocks directly under the root, in program order."""
    return [sch.get(b).name for b in sch.get_child_blocks(sch.get_block("root"))]


def extent(sch, loop) -> int:
    return sch.get(loop).extent
