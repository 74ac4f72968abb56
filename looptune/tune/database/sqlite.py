"""SQLiteDatabase: one SQLite file (WAL mode), safe for several processes at once.

Tables (schema version 1, kept in `meta`):

    workloads(id, key UNIQUE, name, func)          func: tir.serialize JSON text
    records(id, workload, target, median_secs, error_class, time, record)
                                                   record: TuningRecord.to_json() text;
                                                   the other columns are for people and SQL
Each commit is one transaction. Rows are append-only with increasing ids, so a reader
refreshes its in-memory view by reading only the rows past the last id it has seen: another
process's commits are visible on the next query.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path

from ...version import __version__
from ..error import DatabaseError
from ...tir.func import as_prim_func
from .base import Database, TuningRecord, Workload
from ._view import TableDatabase, View

SCHEMA_VERSION = 1
DEFAULT_FILE = "database.sqlite"
_META = "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)"
_TABLES = (
    "CREATE TABLE IF NOT EXISTS workloads (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "key TEXT NOT NULL UNIQUE, name TEXT NOT NULL, func TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS records (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "workload TEXT NOT NULL, target TEXT NOT NULL, median_secs REAL, error_class TEXT, "
    "time REAL NOT NULL, record TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS records_by_workload ON records (workload, target)",
)


@Database.registry.register("sqlite")
class SQLiteDatabase(TableDatabase):
    """The default database: one SQLite file (`path`, or work_dir/database.sqlite) that several
    processes commit to and read at once."""

    def __init__(self, path=None, work_dir=None, module_equality: str = "structural",
                 *, timeout: float = 60.0):
        super().__init__(module_equality)
        if path is None:
            if work_dir is None:
                raise DatabaseError("SQLiteDatabase needs a path or a work_dir "
                                    f"(the file is then work_dir/{DEFAULT_FILE})")
            from .work_dir import check_kind
            check_kind(work_dir, "sqlite")
            try:
                Path(work_dir).mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise DatabaseError(f"the work dir {work_dir} cannot be created "
                                    f"({e.strerror or e}); pass a directory this process can "
                                    "write") from None
            path = Path(work_dir) / DEFAULT_FILE
        self.path = Path(path)
        self.timeout = timeout
        self._lock = threading.RLock()
        self._conn = None
        self._pid = None
        self._connect()

    def _connect(self) -> sqlite3.Connection:
        """The connection of this process (a forked child opens its own)."""
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        if self.path.is_dir():
            raise DatabaseError(f"{self.path} is a directory; give the path of a database file "
                                f"(or work_dir={str(self.path)!r})")
        try:
            conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as e:
            raise DatabaseError(f"cannot open the database {self.path} ({e}); pass a path in a "
                                "directory this process can write") from None
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # in WAL mode: durable against kills
            with _transaction(conn, "IMMEDIATE"):
                conn.execute(_META)
                row = conn.execute("SELECT value FROM meta WHERE name='schema_version'").fetchone()
                if row is not None and row[0] != str(SCHEMA_VERSION):  # nothing is written
                    raise DatabaseError(
                        f"{self.path}: database schema version {row[0]} is not "
                        f"{SCHEMA_VERSION}, the one this looptune {__version__} reads; it was "
                        "written by another looptune version: open it with that version, or "
                        "tune into another work dir")
                for sql in _TABLES:
                    conn.execute(sql)
                if row is None:
                    conn.execute("INSERT INTO meta VALUES ('schema_version', ?)",
                                 (str(SCHEMA_VERSION),))
        except BaseException as e:
            conn.close()
            if isinstance(e, sqlite3.Error):
                raise _failed(self.path, e, self.timeout) from None
            raise
        self._conn, self._pid = conn, os.getpid()
        self._view = View(self.key_of)
        self._db_keys: set = set()  # workload keys that have a row
        self._last_workload = self._last_record = 0
        return conn

    def _refresh(self) -> View:
        """Read the rows committed (by anyone) since the last refresh, in one snapshot."""
        conn = self._connect()
        try:
            with _transaction(conn, "DEFERRED"):
                wrows = conn.execute("SELECT id, key, func FROM workloads WHERE id > ? "
                                     "ORDER BY id", (self._last_workload,)).fetchall()
                rrows = conn.execute("SELECT id, record FROM records WHERE id > ? ORDER BY id",
                                     (self._last_record,)).fetchall()
        except sqlite3.Error as e:
            raise _failed(self.path, e, self.timeout) from None
        return self._absorb(wrows, rrows, str(self.path))

    # ------------------------------------------------------------------ storage
    def commit_workload(self, func) -> Workload:
        func = as_prim_func(func)
        with self._lock:
            wl = self._refresh().add_workload(func)
            if wl.key not in self._db_keys:
                with self._writing():
                    self._insert_workload(wl)
                self._db_keys.add(wl.key)
            return wl

    def commit_tuning_record(self, record: TuningRecord) -> None:
        with self._lock:
            record = self._refresh().own(record)
            r = record.to_json()
            new_workload = record.workload.key not in self._db_keys
            with self._writing():
                if new_workload:
                    self._insert_workload(record.workload)
                self._conn.execute(
                    "INSERT INTO records (workload, target, median_secs, error_class, time, record)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (record.workload.key, record.target.key(),
                     record.median_secs if record.ok else None, record.error_class, record.time,
                     json.dumps(r, separators=(",", ":"))))
            if new_workload:
                self._db_keys.add(record.workload.key)

    @contextmanager
    def _writing(self):
        """One write transaction; an SQLite failure (locked, disk full) as a DatabaseError."""
        try:
            with _transaction(self._conn, "IMMEDIATE"):
                yield
        except sqlite3.Error as e:
            raise _failed(self.path, e, self.timeout) from None

    def _insert_workload(self, wl: Workload) -> None:
        self._conn.execute("INSERT OR IGNORE INTO workloads (key, name, func) VALUES (?, ?, ?)",
                           (wl.key, wl.name, json.dumps(wl.to_json()["func"],
                                                        separators=(",", ":"))))

    def __repr__(self):
        return f"SQLiteDatabase({str(self.path)!r})"


class _transaction:
    """BEGIN <mode> ... COMMIT, or ROLLBACK on an exception (autocommit connections)."""

    def __init__(self, conn, mode: str):
        self.conn, self.mode = conn, mode

    def __enter__(self):
        self.conn.execute(f"BEGIN {self.mode}")

    def __exit__(self, exc_type, *_):
        if exc_type is None:
            try:
                self.conn.execute("COMMIT")
            except sqlite3.Error:  # e.g. the disk filled up while writing the log
                self._rollback()
                raise
        else:
            self._rollback()
        return False

    def _rollback(self) -> None:
        """Undo what is left of a failed transaction. SQLite rolls back by itself on some
        errors (a full disk, an I/O error), and a failing ROLLBACK must not hide the first one."""
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass


def _unreadable(err) -> bool:
    """Is the file not an SQLite database, or damaged? (Not: locked, busy, disk full.)"""
    return isinstance(err, sqlite3.DatabaseError) and not isinstance(err, sqlite3.OperationalError)


def _failed(path, err, timeout: float) -> DatabaseError:
    """What an SQLite failure means for the user: locked by another process, a full disk,
    or a damaged file."""
    code = getattr(err, "sqlite_errorname", "")  # Python 3.11+
    if code.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(err):
        return DatabaseError(f"{path} is locked: another process kept it busy for more than "
                             f"{timeout:g} s ({err}); let it finish, or wait longer with "
                             "SQLiteDatabase(path, timeout=seconds)")
    if code.startswith(("SQLITE_FULL", "SQLITE_IOERR")) or "full" in str(err):
        return DatabaseError(f"cannot write to {path} ({err}): is the disk full? The records "
                             "committed before are kept; free some space, then run again with "
                             "the same work dir to resume")
    if _unreadable(err):
        return _damaged(path, err)
    return DatabaseError(f"cannot use the database {path} ({err}); check that this process may "
                         "read and write it and its directory")


def _damaged(path, err) -> DatabaseError:
    return DatabaseError(f"{path} is not a readable SQLite database ({err}): it is another kind "
                         "of file, or damaged (truncated?); restore it from a copy, or tune "
                         "into another work dir")
