"""ScheduleFnDatabase: a hand-written schedule function posing as a database, so compiling
with it (alone, or after tuned records in an OrderedUnionDatabase) uses the same path."""
from __future__ import annotations

from ...schedule import Schedule
from ...tir.func import as_prim_func
from .base import Database, Workload


@Database.registry.register("schedule-fn")
class ScheduleFnDatabase(Database):
    """`fn(sch) -> bool` schedules `sch` in place and says whether it did; nothing is stored."""

    def __init__(self, fn, module_equality: str = "structural"):
        super().__init__(module_equality)
        if not callable(fn):
            raise TypeError(f"ScheduleFnDatabase needs a function fn(sch) -> bool, got {fn!r}")
        self.fn = fn

    def has_workload(self, func) -> bool:
        func = as_prim_func(func)
        return False

    def commit_workload(self, func) -> Workload:
        func = as_prim_func(func)
        return Workload(func, self.key_of(func))

    def commit_tuning_record(self, record) -> None:
        pass

    def get_all_tuning_records(self) -> list:
        return []

    def __len__(self) -> int:
        return 0

    def query_schedule(self, func, target, *, evaluator=None):
        sch = Schedule(func, seed=0)
        done = self.fn(sch)
        if not isinstance(done, bool):
            raise TypeError(f"the schedule function {getattr(self.fn, '__name__', self.fn)!r} "
                            f"returned {done!r} for {func.name}; it must return True (scheduled) "
                            "or False (not handled)")
        return sch if done else None
