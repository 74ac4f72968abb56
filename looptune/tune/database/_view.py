"""The in-memory view shared by the storing databases: workloads by key, records in commit
order, and the loading of stored rows (whose key may come from another module_equality or
an older hash) with bad rows reported, never fatal."""
from __future__ import annotations

import dataclasses
import json
import os
import warnings

from ...tir.serialize import func_from_json
from ..error import DatabaseWarning
from ...tir.func import as_prim_func
from .base import Database, TuningRecord, Workload

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


class TableDatabase(Database):
    """What the databases kept in tables (SQLite, PostgreSQL) share: reads through `_refresh`
    (the rows committed since the last one, added to `_view`) under `_lock`, and one
    connection `_conn` per process (`_pid`), closed by its owner only."""

    def _refresh(self) -> View:
        raise NotImplementedError

    def _absorb(self, wrows, rrows, source: str) -> View:
        """Add the rows `_refresh` read (load_table_rows) to `_view`, and move the cursors
        `_last_workload` / `_last_record` past them."""
        last_w, last_r = load_table_rows(self._view, self._db_keys, wrows, rrows, source)
        self._last_workload = self._last_workload if last_w is None else last_w
        self._last_record = self._last_record if last_r is None else last_r
        return self._view

    def has_workload(self, func) -> bool:
        func = as_prim_func(func)
        with self._lock:
            return self._holds(func, self._refresh().workloads)

    def get_all_tuning_records(self) -> list:
        with self._lock:
            return list(self._refresh().records)

    def __len__(self) -> int:
        with self._lock:
            return len(self._refresh().records)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None


def load_table_rows(view: View, keys: set, wrows, rrows, source: str) -> tuple:
    """Add rows read from a `workloads` table ((id, key, func JSON)) and a `records` table
    ((id, record JSON)) of `source` to `view`, each bad row skipped with a warning, and their
    keys to `keys`; returns the last (workload id, record id) read (None where no rows)."""
    last_w = last_r = None
    skipper = Skipper(f"{source}, table workloads")
    for rid, key, text in wrows:
        keys.add(key)
        obj = _loads(text, skipper.at(f"id {rid}"))
        if obj is not _UNREADABLE:
            view.load_workload({"key": key, "func": obj}, skipper.at(f"id {rid}"))
        last_w = rid
    skipper.done()
    skipper = Skipper(f"{source}, table records")
    for rid, text in rrows:
        obj = _loads(text, skipper.at(f"id {rid}"))
        if obj is not _UNREADABLE:
            view.load_record(obj, skipper.at(f"id {rid}"))
        last_r = rid
    skipper.done()
    return last_w, last_r


_UNREADABLE = object()


def _loads(text, skip):
    """A stored JSON column as an object, or _UNREADABLE (reported) when it does not parse
    (or nests deeper than Python's recursion limit)."""
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError) as err:
        skip(f"not JSON: {type(err).__name__}: {err}")
        return _UNREADABLE
