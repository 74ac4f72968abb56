"""Faults during real tuning runs: kernels that crash, hang, abort, run out of memory or
compute wrong results are classified and the run goes on; a full disk, a locked database and
two runs sharing one database lose nothing and fail, if at all, with a clear DatabaseError.
(Fault-by-fault runner checks: test_measure.py; kills: test_resume.py.)"""
from __future__ import annotations

import sqlite3

import pytest

from looptune.testing import soak
from looptune.testing.faults import FAULTS, WORKER_KILLING, matmul_func, tune_with_faults
from looptune.tune import EvaluatorConfig, tune_tir
from looptune.tune.database import SQLiteDatabase
from looptune.tune.error import DatabaseError

pytestmark = pytest.mark.cc

FAST = EvaluatorConfig(num_threads=1, repeat=2, min_repeat_ms=1)


def test_faulty_kernels_in_a_tuning_run_are_classified_and_the_best_is_correct(tmp_path):
    r = tune_with_faults(tmp_path)
    assert not r.not_measured
    assert [o.kind for o in r.outcomes] == [f.kind for f in FAULTS]  # every other candidate
    for o in r.outcomes:
        assert o.classified, (o.kind, o.expected, o.error_class, o.error_msg)
    assert r.good == 4 + len(FAULTS) and not r.unexpected, r.unexpected
    # one measurement worker, and one more after each fault that takes it down
    assert r.workers_started == 1 + len(WORKER_KILLING)
    assert r.workers_left == 0
    assert r.best_ok, r.best_msg


class FillingDatabase(SQLiteDatabase):
    """The disk is full after `room` commits: SQLite may not grow the file any more, so the
    next commit fails inside its INSERT (SQLITE_FULL, and SQLite rolls back by itself)."""

    def __init__(self, *args, room: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.room = room
        self.committed: list = []

    def commit_tuning_record(self, record):
        super().commit_tuning_record(record)
        self.committed.append(soak.record_key(record))
        if len(self.committed) == self.room:
            pages = self._conn.execute("PRAGMA page_count").fetchone()[0]
            self._conn.execute(f"PRAGMA max_page_count = {pages}")


def test_disk_full_inside_a_commit_stops_with_a_clear_error_and_keeps_the_records(tmp_path):
    db = FillingDatabase(work_dir=tmp_path, room=5)
    with pytest.raises(DatabaseError, match="is the disk full"):
        tune_tir(matmul_func(), "cpu", database=db, max_trials_global=12, num_trials_per_iter=4,
                 seed=0, evaluator=FAST, progress=False)
    assert len(db.committed) == 5
    assert not db._conn.in_transaction  # nothing half-done, and no write lock left held
    other = SQLiteDatabase(work_dir=tmp_path, timeout=1.0)  # another process could write
    assert [soak.record_key(r) for r in other.get_all_tuning_records()] == db.committed
    assert other._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    tune_tir(matmul_func(), "cpu", database=other, max_trials_global=12, num_trials_per_iter=4,
             seed=0, evaluator=FAST, progress=False)  # space freed: resume
    keys = [soak.record_key(r) for r in other.get_all_tuning_records()]
    assert len(keys) == 12 and keys[:5] == db.committed
    other.close()
    db.close()


def test_disk_full_while_the_log_is_written_at_commit(tmp_path):
    """In a subprocess whose files may not grow (RLIMIT_FSIZE) after 6 commits: the 7th
    fails at COMMIT, the run stops with a DatabaseError, the 6 stay, a new run resumes."""
    check = soak.disk_full(tmp_path, full_after=6, trials=10)
    assert check.ok, check.detail


def test_a_failed_commit_leaves_no_transaction_open(tmp_path):
    db = SQLiteDatabase(work_dir=tmp_path, timeout=1.0)
    conn = db._conn

    class FailingCommit:  # sqlite3.Connection's methods cannot be patched: wrap it
        """The COMMIT of a write fails as on a full disk; the transaction stays open."""
        in_transaction = property(lambda self: conn.in_transaction)
        wrote = False

        def execute(self, sql, *args):
            self.wrote = (self.wrote or sql.startswith("INSERT")) and sql != "ROLLBACK"
            if sql == "COMMIT" and self.wrote:
                raise sqlite3.OperationalError("database or disk is full")
            return conn.execute(sql, *args)

    db._conn = FailingCommit()
    with pytest.raises(DatabaseError, match="is the disk full"):
        db.commit_workload(matmul_func())
    assert not conn.in_transaction
    db._conn = conn
    db.commit_workload(matmul_func())  # the same connection goes on
    assert SQLiteDatabase(work_dir=tmp_path).has_workload(matmul_func())
    db.close()


def test_a_locked_database_is_waited_for_then_a_clear_error(tmp_path):
    check = soak.locked_database(tmp_path, timeout_s=1.0, hold_s=2.0)
    assert check.ok, check.detail


def test_a_commit_into_a_database_locked_too_long_fails_clearly(tmp_path):
    db = SQLiteDatabase(work_dir=tmp_path, timeout=0.5)
    with soak.write_lock(db.path, 30):
        with pytest.raises(DatabaseError, match="is locked: another process") as e:
            db.commit_workload(matmul_func())
        assert "timeout=" in str(e.value)
        assert len(db) == 0  # reading goes on (WAL) while another process writes
    db.commit_workload(matmul_func())  # and writing once it is done
    db.close()


def test_two_tuning_processes_share_one_database(tmp_path):
    check = soak.shared_database(tmp_path, trials=8)
    assert check.ok, check.detail
