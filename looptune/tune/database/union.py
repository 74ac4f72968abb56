"""Read-only unions of databases: UnionDatabase answers with the best record across all of
them; OrderedUnionDatabase with the first one that can answer (e.g. tuned records, then a
hand-written fallback). Each member keeps its own module_equality."""
from __future__ import annotations

from .base import Database, MODULE_EQUALITIES


@Database.registry.register("union")
class UnionDatabase(Database):
    def __init__(self, *databases, module_equality: str | None = None):
        for d in databases:
            if not isinstance(d, Database):
                raise TypeError(f"{type(self).__name__} takes Database instances, got {d!r}")
        if module_equality is None:  # lenient replay if any member matches by anchor block
            module_equality = next((m for m in reversed(MODULE_EQUALITIES)
                                    if any(d.module_equality == m for d in databases)),
                                   "structural")
        super().__init__(module_equality)
        self.databases = tuple(databases)

    def has_workload(self, func) -> bool:
        return any(d.has_workload(func) for d in self.databases)

    def commit_workload(self, func):
        raise TypeError(f"{type(self).__name__} is read-only; commit to one of its databases")

    def commit_tuning_record(self, record) -> None:
        raise TypeError(f"{type(self).__name__} is read-only; commit to one of its databases")

    def get_all_tuning_records(self) -> list:
        return [r for d in self.databases for r in d.get_all_tuning_records()]

    def __len__(self) -> int:
        return sum(len(d) for d in self.databases)

    def query_tuning_record(self, func, target, k: int = 1) -> list:
        recs = [r for d in self.databases for r in d.query_tuning_record(func, target, k)]
        recs.sort(key=lambda r: r.median_secs)  # stable: on a tie the earlier database wins
        return recs[:k]

    def query_schedule(self, func, target):
        """The schedule of the best record; each member replays its own records."""
        def best(d):
            top = d.query_tuning_record(func, target, 1)
            return top[0].median_secs if top else float("inf")

        ranked = sorted((best(d), i) for i, d in enumerate(self.databases))
        for secs, i in ranked:
            if secs == float("inf"):
                break
            sch = self.databases[i].query_schedule(func, target)
            if sch is not None:
                return sch
        return None

    def close(self) -> None:
        for d in self.databases:
            d.close()


@Database.registry.register("ordered-union")
class OrderedUnionDatabase(UnionDatabase):
    def query_tuning_record(self, func, target, k: int = 1) -> list:
        for d in self.databases:
            recs = d.query_tuning_record(func, target, k)
            if recs:
                return recs
        return []

    def query_schedule(self, func, target):
        """The first member's schedule (a member without one for func passes it on)."""
        for d in self.databases:
            sch = d.query_schedule(func, target)
            if sch is not None:
                return sch
        return None
