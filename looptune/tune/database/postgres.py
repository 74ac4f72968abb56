"""PostgresDatabase: a team database on a PostgreSQL server (psycopg 3), written by many
tuners on many machines at once.

Tables (created and upgraded by MIGRATIONS; the version is kept in `schema_version`):

    workloads(id, key UNIQUE, name, func)             func: tir.serialize JSON text
    records(id, key UNIQUE, workload, target, median_secs, error_class, time, record, machine)
                                                      key: base.record_key (the trial's identity)
                                                      record: TuningRecord.to_json() text
Records are written with upserts on their key (ON CONFLICT DO NOTHING): sending a record again
(a restarted tuner, `looptune db push`) stores nothing twice. Records are kept as JSON text,
not jsonb, which refuses the NUL character an error message may hold. Writers hold a
transaction-scoped advisory lock, so row ids become visible in increasing order and a reader
refreshes by reading only the rows past the last id it has seen, as sqlite.py does.
"""
from __future__ import annotations

import json
import os
import threading
from urllib.parse import unquote, urlsplit

from ...tir.func import as_prim_func
from ...version import __version__
from ..error import DatabaseError, ServerUnreachableError
from ._view import TableDatabase, View
from .base import Database, TuningRecord, Workload, record_key
from .url import hide_password

SCHEMES = ("postgresql", "postgres")
WRITE_LOCK = 0x6C6F6F70  # pg_advisory_xact_lock key of every writer ("loop")
MIGRATE_LOCK = WRITE_LOCK + 1

# Schema migrations as data: MIGRATIONS[v] takes a database from version v to v + 1, in one
# transaction. Append new steps; never edit the ones a server may already have run.
MIGRATIONS = (
    # 1: workloads and records, keyed by workload key and by trial identity
    ("CREATE TABLE workloads (id BIGSERIAL PRIMARY KEY, key TEXT NOT NULL UNIQUE, "
     "name TEXT NOT NULL, func TEXT NOT NULL)",
     "CREATE TABLE records (id BIGSERIAL PRIMARY KEY, key TEXT NOT NULL UNIQUE, "
     "workload TEXT NOT NULL, target TEXT NOT NULL, median_secs DOUBLE PRECISION, "
     "error_class TEXT, time DOUBLE PRECISION NOT NULL, record TEXT NOT NULL)",
     "CREATE INDEX records_by_workload ON records (workload, target)"),
    # 2: the measuring machine's fingerprint id as a column, for SQL by machine
    ("ALTER TABLE records ADD COLUMN machine TEXT",
     "UPDATE records SET machine = (record::json -> 'measure' -> 'machine' ->> 'id')",
     "CREATE INDEX records_by_machine ON records (machine)"),
)
SCHEMA_VERSION = len(MIGRATIONS)


def _psycopg():
    """psycopg, imported only when a PostgreSQL database is used (an optional dependency)."""
    try:
        import psycopg
    except ImportError:
        raise DatabaseError("a PostgreSQL database needs psycopg 3: pip install "
                            "'looptune[cluster]'") from None
    return psycopg


class ServerURL:
    """A postgresql:// URL, checked before connecting; `shown` hides the password."""

    def __init__(self, url: str):
        if not isinstance(url, str):
            raise DatabaseError(f"a PostgreSQL URL must be a string, got {type(url).__name__}")
        try:
            u = urlsplit(url)
            port = u.port
        except ValueError as e:
            raise DatabaseError(f"bad PostgreSQL URL {hide_password(url)!r} ({e}); expected "
                                "postgresql://user:password@host:5432/dbname") from None
        if u.scheme not in SCHEMES:
            raise DatabaseError(f"bad PostgreSQL URL {hide_password(url)!r}: expected "
                                "postgresql://user:password@host:5432/dbname")
        self.url = url
        self.user = unquote(u.username) if u.username else None
        self.password = unquote(u.password) if u.password else None
        self.host, self.port = u.hostname or "localhost", port or 5432
        self.dbname = unquote(u.path.lstrip("/"))
        self.shown = hide_password(url)
        if not self.dbname or "/" in self.dbname:
            raise DatabaseError(f"the PostgreSQL URL {self.shown!r} names no database: add "
                                "/DBNAME (postgresql://user:password@host:5432/dbname)")

    def hide(self, text: str) -> str:
        """text with the password (as typed and unquoted) replaced by ***."""
        text = str(text)
        for secret in {self.password, urlsplit(self.url).password} - {None, ""}:
            text = text.replace(secret, "***")
        return text


@Database.registry.register("postgres")
class PostgresDatabase(TableDatabase):
    """Records on a PostgreSQL server (`url`: postgresql://user:password@host:5432/dbname),
    shared by every tuner that opens it. The database must exist; its tables are created or
    upgraded on first use. Needs psycopg 3 (pip install 'looptune[cluster]')."""

    def __init__(self, url: str, module_equality: str = "structural", *,
                 connect_timeout: float = 10.0, connect: bool = True):
        super().__init__(module_equality)
        self.server = ServerURL(url)
        self.connect_timeout = connect_timeout
        self._lock = threading.RLock()
        self._conn = self._pid = None
        self._reset_view()
        if connect:
            self.connect()

    def _reset_view(self) -> None:
        self._view = View(self.key_of)
        self._db_keys: set = set()  # workload keys that have a row
        self._last_workload = self._last_record = 0

    def connect(self):
        """The connection of this process, opened (and the schema migrated) if needed:
        ServerUnreachableError if the server cannot be reached, DatabaseError naming what is
        wrong otherwise."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid() and not self._conn.closed:
                return self._conn
            psycopg = _psycopg()
            try:
                conn = psycopg.connect(self.server.url, autocommit=True,
                                       connect_timeout=max(1, round(self.connect_timeout)),
                                       application_name="looptune")
            except psycopg.Error as e:
                raise self._failed(e) from None
            try:
                self._migrate(conn)
            except BaseException as e:
                conn.close()
                if isinstance(e, psycopg.Error):
                    raise self._failed(e) from None
                raise
            self._conn, self._pid = conn, os.getpid()
            return conn

    def _migrate(self, conn) -> None:
        """Bring the schema to SCHEMA_VERSION, one migration per transaction, under a lock so
        that tuners opening a new database at once do not race."""
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT version FROM schema_version").fetchone()
            version = 0 if row is None else row[0]
            if version > SCHEMA_VERSION:
                raise DatabaseError(
                    f"{self.server.shown}: database schema version {version} is newer than "
                    f"{SCHEMA_VERSION}, the one this looptune {__version__} knows; upgrade "
                    "looptune to use this database")
            if row is None:
                conn.execute("INSERT INTO schema_version VALUES (0)")
            for v in range(version, SCHEMA_VERSION):
                for sql in MIGRATIONS[v]:
                    conn.execute(sql)
                conn.execute("UPDATE schema_version SET version = %s", (v + 1,))

    def schema_version(self) -> int:
        return self._read(lambda c: c.execute("SELECT version FROM schema_version").fetchone()[0])

    def _failed(self, err) -> DatabaseError:
        """What a psycopg error means for the user, naming which failure it is (never the
        password)."""
        psycopg = _psycopg()
        s = self.server
        msg = s.hide(str(err).strip())
        where = f"{s.host}:{s.port}"
        if "authentication failed" in msg or "no password supplied" in msg:
            return DatabaseError(f"the PostgreSQL server at {where} refused the credentials of "
                                 f"user {s.user!r} ({msg.splitlines()[-1]}); check the user and "
                                 f"password in the URL {s.shown}")
        if f'database "{s.dbname}" does not exist' in msg:
            return DatabaseError(f"the PostgreSQL server at {where} has no database "
                                 f"{s.dbname!r}; create it (createdb {s.dbname}, or CREATE "
                                 "DATABASE) or fix the name in the URL")
        if "invalid" in msg and isinstance(err, psycopg.ProgrammingError):
            return DatabaseError(f"bad PostgreSQL URL {s.shown} ({msg})")
        if isinstance(err, (psycopg.OperationalError, psycopg.InterfaceError)) or \
                (self._conn is not None and self._conn.closed):
            refused = "refused" in msg
            return ServerUnreachableError(
                f"the PostgreSQL server at {where} {'refused the connection' if refused else 'is unreachable'}"
                f" ({msg.splitlines()[0] if msg else type(err).__name__}); is it running and "
                "accepting TCP connections there?")
        return DatabaseError(f"the PostgreSQL database {s.shown} failed: "
                             f"{type(err).__name__}: {msg}")

    def _read(self, fn):
        """fn(connection) in one read-only snapshot (REPEATABLE READ): workloads and records
        read together are consistent."""
        with self._lock:
            conn = self.connect()
            try:
                with conn.transaction():
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    return fn(conn)
            except _psycopg().Error as e:
                raise self._dropped(e) from None

    def _write(self, fn):
        """fn(connection) in one write transaction holding the writers' lock."""
        with self._lock:
            conn = self.connect()
            try:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                    return fn(conn)
            except _psycopg().Error as e:
                raise self._dropped(e) from None

    def _dropped(self, err) -> DatabaseError:
        """The error of a failed statement; a lost connection is dropped (reopened next time)."""
        out = self._failed(err)
        if isinstance(out, ServerUnreachableError):
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - it is gone anyway
                pass
            self._conn = None
        return out

    def _refresh(self) -> View:
        """Read the rows committed (by anyone) since the last refresh."""
        def read(conn):
            return (conn.execute("SELECT id, key, func FROM workloads WHERE id > %s ORDER BY id",
                                 (self._last_workload,)).fetchall(),
                    conn.execute("SELECT id, record FROM records WHERE id > %s ORDER BY id",
                                 (self._last_record,)).fetchall())
        wrows, rrows = self._read(read)
        return self._absorb(wrows, rrows, str(self.server.shown))

    # ------------------------------------------------------------------ storage
    def commit_workload(self, func) -> Workload:
        func = as_prim_func(func)
        with self._lock:
            wl = self._refresh().add_workload(func)
            if wl.key not in self._db_keys:
                self._write(lambda c: _insert_workload(c, wl))
                self._db_keys.add(wl.key)
            return wl

    def commit_tuning_record(self, record: TuningRecord) -> None:
        self.commit_records([record])

    def commit_records(self, records) -> int:
        """Upsert records in one transaction; how many were new (the others were stored
        already: the same trial, `record_key`)."""
        with self._lock:
            view = self._view
            records = [view.own(r) for r in records]
            if not records:
                return 0

            def write(conn):
                for wl in {r.workload.key: r.workload for r in records}.values():
                    if wl.key not in self._db_keys:
                        _insert_workload(conn, wl)
                new = 0
                for r in records:
                    cur = conn.execute(
                        "INSERT INTO records (key, workload, target, median_secs, error_class, "
                        "time, record, machine) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                        "ON CONFLICT (key) DO NOTHING",
                        (record_key(r), r.workload.key, r.target.key(),
                         r.median_secs if r.ok else None, r.error_class, r.time,
                         json.dumps(r.to_json(), separators=(",", ":")),
                         (r.measure.get("machine") or {}).get("id")))
                    new += cur.rowcount
                return new
            new = self._write(write)
            self._db_keys.update(r.workload.key for r in records)
            return new

    def keys(self) -> set:
        """The keys (record_key) of every stored record, without reading the records."""
        return {k for (k,) in self._read(lambda c: c.execute("SELECT key FROM records").fetchall())}

    def __repr__(self):
        return f"PostgresDatabase({self.server.shown!r})"


def _insert_workload(conn, wl: Workload) -> None:
    conn.execute("INSERT INTO workloads (key, name, func) VALUES (%s, %s, %s) "
                 "ON CONFLICT (key) DO NOTHING",
                 (wl.key, wl.name, json.dumps(wl.to_json()["func"], separators=(",", ":"))))
