"""MemoryDatabase: records in a list, gone with the process (tests, one-off tuning)."""
from __future__ import annotations

from ...tir.func import as_prim_func
from .base import Database, TuningRecord, Workload
from ._view import View


@Database.registry.register("memory")
class MemoryDatabase(Database):
    """A database that lives in this process only (database="memory"): for tests and one-off
    tuning."""

    def __init__(self, module_equality: str = "structural"):
        super().__init__(module_equality)
        self._view = View(self.key_of)

    def has_workload(self, func) -> bool:
        func = as_prim_func(func)
        return self._holds(func, self._view.workloads)

    def commit_workload(self, func) -> Workload:
        func = as_prim_func(func)
        return self._view.add_workload(func)

    def commit_tuning_record(self, record: TuningRecord) -> None:
        self._view.records.append(self._view.own(record))

    def get_all_tuning_records(self) -> list:
        return list(self._view.records)

    def __len__(self) -> int:
        return len(self._view.records)
