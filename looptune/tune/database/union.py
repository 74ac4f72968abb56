"""Read-only unions of databases: UnionDatabase answers with the best record across all of
them; OrderedUnionDatabase with the first one that can answer (e.g. tuned records, then a
hand-written fallback). Each member keeps its own module_equality."""
from __future__ import annotations

from ...tir.func import as_prim_func
from .base import Database, MODULE_EQUALITIES


@Database.registry.register("union")
class UnionDatabase(Database):
    """Several databases read as one: queries rank the records of all of them; commits are
    refused (commit to a member)."""

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
        func = as_prim_func(func)
        return any(d.has_workload(func) for d in self.databases)

    def commit_workload(self, func):
        func = as_prim_func(func)
        raise TypeError(f"{type(self).__name__} is read-only; commit to one of its databases")

    def commit_tuning_record(self, record) -> None:
        raise TypeError(f"{type(self).__name__} is read-only; commit to one of its databases")

    def get_all_tuning_records(self) -> list:
        return [r for d in self.databases for r in d.get_all_tuning_records()]

    def __len__(self) -> int:
        return sum(len(d) for d in self.databases)

    def newest_record(self, func, target):
        recs = [r for r in (d.newest_record(func, target) for d in self.databases) if r]
        return max(recs, key=lambda r: r.time) if recs else None

    def _settings(self, func, target, evaluator):
        """The settings every member ranks with: the given ones, or the newest record's."""
        if evaluator is not None:
            return evaluator
        newest = self.newest_record(func, target)
        return None if newest is None else newest.measure

    def query_tuning_record(self, func, target, k: int = 1, *, evaluator=None) -> list:
        evaluator = self._settings(func, target, evaluator)
        if evaluator is None:
            return []
        recs = [r for d in self.databases
                for r in d.query_tuning_record(func, target, k, evaluator=evaluator)]
        recs.sort(key=lambda r: r.median_secs)  # stable: on a tie the earlier database wins
        return recs[:k]

    def query_schedule(self, func, target, *, evaluator=None):
        """The schedule of the best record; each member replays its own records."""
        evaluator = self._settings(func, target, evaluator)

        def best(d):
            top = [] if evaluator is None else d.query_tuning_record(func, target, 1,
                                                                     evaluator=evaluator)
            return top[0].median_secs if top else float("inf")

        ranked = sorted((best(d), i) for i, d in enumerate(self.databases))
        for secs, i in ranked:
            if secs == float("inf"):
                break
            sch = self.databases[i].query_schedule(func, target, evaluator=evaluator)
            if sch is not None:
                return sch
        return None

    def close(self) -> None:
        for d in self.databases:
            d.close()


@Database.registry.register("ordered-union")
class OrderedUnionDatabase(UnionDatabase):
    """Several databases read as one, in order: each query is answered by the first member that
    has an answer. A record held by several members (a local work dir and the server it was
    pushed to: the same trial, `record_key`) is listed once, as the first member holds it."""

    def get_all_tuning_records(self) -> list:
        from .synced import merged
        out: list = []
        for d in self.databases:
            out = merged(out, d.get_all_tuning_records())
        return out

    def __len__(self) -> int:
        return len(self.get_all_tuning_records())

    def newest_record(self, func, target):
        for d in self.databases:
            rec = d.newest_record(func, target)
            if rec is not None:
                return rec
        return None

    def query_tuning_record(self, func, target, k: int = 1, *, evaluator=None) -> list:
        for d in self.databases:
            recs = d.query_tuning_record(func, target, k, evaluator=evaluator)
            if recs:
                return recs
        return []

    def query_schedule(self, func, target, *, evaluator=None):
        """The first member's schedule (a member without one for func passes it on)."""
        for d in self.databases:
            sch = d.query_schedule(func, target, evaluator=evaluator)
            if sch is not None:
                return sch
        return None
