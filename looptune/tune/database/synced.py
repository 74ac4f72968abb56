"""SyncedDatabase: a local database kept in step with a shared one (a PostgreSQL server), so
tuning never stops when the server goes away; and `push` / `pull`, which sync the two."""
from __future__ import annotations

import threading
import time
import warnings
import weakref

from ...tir.func import as_prim_func
from ..error import DatabaseError, DatabaseWarning, ServerUnreachableError
from .base import Database, TuningRecord, Workload, record_key

_KEYS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # record -> record_key


def key_of_record(record: TuningRecord) -> str:
    """record_key, computed once per record object."""
    key = _KEYS.get(record)
    if key is None:
        key = _KEYS[record] = record_key(record)
    return key


def merged(first: list, second: list) -> list:
    """first's records, then second's that first lacks (the same trial: record_key)."""
    have = {key_of_record(r) for r in first}
    return list(first) + [r for r in second if key_of_record(r) not in have]


def push(local: Database, shared) -> tuple:
    """Send the records of `local` that `shared` (a PostgresDatabase) lacks: (sent, already
    there). Idempotent: the server stores a trial once."""
    there = shared.keys()
    todo = [r for r in local.get_all_tuning_records() if key_of_record(r) not in there]
    sent = shared.commit_records(todo) if todo else 0
    return sent, len(local) - sent


def pull(local: Database, shared: Database) -> tuple:
    """Copy the records of `shared` that `local` lacks into it: (copied, already there)."""
    have = {key_of_record(r) for r in local.get_all_tuning_records()}
    records = shared.get_all_tuning_records()
    todo = [r for r in records if key_of_record(r) not in have]
    for r in todo:
        local.commit_tuning_record(r)
    return len(todo), len(records) - len(todo)


@Database.registry.register("synced")
class SyncedDatabase(Database):
    """Every record goes to `local` first (durable: its errors stop the run), then to `shared`.
    When the server cannot be reached, or fails, the run goes on in `local`: it says so once
    (a DatabaseWarning), tries again every `retry_s` seconds and, when the server is back (or
    at `flush` / `close`), sends it every record it lacks. Upserts on the trial identity make
    re-sending harmless, so nothing is lost or stored twice. Reads see local's records, then
    the shared ones local lacks (the server's last known ones while it is away)."""

    def __init__(self, local: Database, shared: Database, *, retry_s: float = 30.0):
        super().__init__(local.module_equality)
        self.local, self.shared, self.retry_s = local, shared, retry_s
        self.online = False
        self.pending = 0  # records committed while the server was away
        self._next_try = 0.0
        self._said = False  # the outage was reported
        self._flushed = True  # nothing committed since the last flush
        self._shared_records: list = []
        self._lock = threading.RLock()
        self._reconnect()

    # ------------------------------------------------------------------ the server
    def _reconnect(self) -> bool:
        """Connect and send the backlog; on a server that cannot be reached, go offline."""
        self._next_try = time.monotonic() + self.retry_s
        try:
            self.shared.connect()
            sent, _ = push(self.local, self.shared)
        except ServerUnreachableError as e:
            self._offline(e)
            return False
        except DatabaseError as e:
            if self.online or self.pending:  # mid-run: the records are safe locally
                self._offline(e)
                return False
            raise  # at open: a wrong URL, password or database is the user's to fix
        if not self.online and self.pending:
            warnings.warn(f"{self.shared.server.shown} is back: sent it the {sent} record(s) "
                          "it lacked", DatabaseWarning)
        self.online, self.pending = True, 0
        return True

    def _offline(self, err: DatabaseError) -> None:
        if self.online or not self._said:  # once per outage, not per record
            said = str(err) if str(err).endswith(("?", ".")) else f"{err}."
            warnings.warn(f"{said} Tuning goes on in the local database {self.local!r}; its "
                          "records are sent to the server when it is back (or with `looptune "
                          "db push`)", DatabaseWarning)
            self._said = True
        self.online = False

    def _with_shared(self, fn) -> None:
        """fn(shared) if the server is up (or due for another try, which sends the backlog
        instead); a failure sends this database offline."""
        if not self.online:
            self.pending += 1
            if time.monotonic() >= self._next_try:
                self._reconnect()
            return
        try:
            fn(self.shared)
        except DatabaseError as e:
            self.pending += 1
            self._offline(e)

    # ------------------------------------------------------------------ storage
    def has_workload(self, func) -> bool:
        func = as_prim_func(func)
        return self.local.has_workload(func) or self._holds(
            func, {r.workload.key: r.workload for r in self._shared()})

    def commit_workload(self, func) -> Workload:
        func = as_prim_func(func)
        with self._lock:
            wl = self.local.commit_workload(func)
            if self.online:
                try:
                    self.shared.commit_workload(func)
                except DatabaseError as e:
                    self._offline(e)
            return wl

    def commit_tuning_record(self, record: TuningRecord) -> None:
        with self._lock:
            self._flushed = False
            self.local.commit_tuning_record(record)
            self._with_shared(lambda s: s.commit_tuning_record(record))

    def _shared(self) -> list:
        """The server's records: read now when it is up, else the last ones read."""
        if self.online:
            try:
                self._shared_records = self.shared.get_all_tuning_records()
            except DatabaseError as e:
                self._offline(e)
        return self._shared_records

    def get_all_tuning_records(self) -> list:
        with self._lock:
            return merged(self.local.get_all_tuning_records(), self._shared())

    def __len__(self) -> int:
        return len(self.get_all_tuning_records())

    def flush(self) -> None:
        """Try once more to send the backlog (at the end of a run); if the server is still
        away, say how many records wait for it."""
        with self._lock:
            self._flushed = True
            if self.online or (not self.pending and not self._said):
                return
            if not self._reconnect() and self.pending:
                warnings.warn(f"{self.pending} record(s) of this run are in the local database "
                              f"{self.local!r} only: they are sent at the next run with it and "
                              f"{self.shared.server.shown}, or with `looptune db push`",
                              DatabaseWarning)

    def close(self) -> None:
        if not self._flushed:
            self.flush()
        self.local.close()
        self.shared.close()

    def __repr__(self):
        return f"SyncedDatabase({self.local!r}, {self.shared!r})"
