"""The in-memory view shared by the storing databases: workloads by key, records in commit
order, and the loading of stored rows (whose key may come from another module_equality or
an older hash) with bad rows reported, never fatal."""
from __future__ import annotations

import dataclasses
import warnings

from ...tir.serialize import func_from_json
from ..error import DatabaseWarning
from .base import TuningRecord, Workload

MAX_WARNINGS = 10  # per file or table: beyond this, one summary instead of a flood


class View:
    """What a storing database has read so far: workloads by key (with the keys they were stored
    under), and records in commit order."""

    def __init__(self, key_of):
        self.key_of = key_of
        self.workloads: dict = {}   # key under this database's module_equality -> Workload
        self.alias: dict = {}       # key as stored -> key under this module_equality
        self.records: list = []

    def add_workload(self, func, stored_key: str | None = None) -> Workload:
        """The Workload of func (the first one seen for its key wins)."""
        key = self.key_of(func)
        wl = self.workloads.get(key)
        if wl is None:
            wl = self.workloads[key] = Workload(func, key)
        if stored_key is not None:
            self.alias.setdefault(stored_key, key)
        return wl

    def own(self, record: TuningRecord) -> TuningRecord:
        """The record pointing at this view's Workload (keys differ across equalities)."""
        wl = record.workload
        if self.workloads.get(wl.key) is wl:
            return record
        mine = self.add_workload(wl.func)
        return record if mine is wl else dataclasses.replace(record, workload=mine)

    def load_workload(self, obj, skip) -> str | None:
        """Add a stored workload (a Workload.to_json dict); returns its stored key."""
        try:
            if not isinstance(obj, dict) or not isinstance(obj.get("key"), str):
                raise ValueError("not a workload object with a 'key'")
            self.add_workload(func_from_json(obj["func"]), obj["key"])
            return obj["key"]
        except Exception as err:  # noqa: BLE001  (stored data: report and go on)
            skip(f"bad workload: {type(err).__name__}: {err}")
            return None

    def load_record(self, obj, skip) -> None:
        """Add a stored record (a TuningRecord.to_json dict) if its workload is known."""
        try:
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            key = self.alias.get(obj.get("workload"))
            if key is None:
                skip(f"record of unknown workload {obj.get('workload')!r}")
                return
            self.records.append(TuningRecord.from_json(obj, self.workloads[key]))
        except Exception as err:  # noqa: BLE001
            skip(f"bad record: {type(err).__name__}: {err}")


class Skipper:
    """Reports skipped rows of one source as warnings: the first MAX_WARNINGS one by one."""

    def __init__(self, source: str):
        self.source = source
        self.count = 0

    def at(self, where):
        return lambda reason: self.skip(where, reason)

    def skip(self, where, reason: str) -> None:
        self.count += 1
        if self.count <= MAX_WARNINGS:
            warnings.warn(f"{self.source}, {where}: skipped ({reason})", DatabaseWarning,
                          stacklevel=4)

    def done(self) -> None:
        if self.count > MAX_WARNINGS:
            warnings.warn(f"{self.source}: skipped {self.count - MAX_WARNINGS} more bad entries",
                          DatabaseWarning, stacklevel=3)
