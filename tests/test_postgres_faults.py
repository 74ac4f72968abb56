"""Faults with a real PostgreSQL server (tests/pg_server.py) and real `looptune tune`
processes: three tuners share one server while one is SIGKILLed and restarted; the server is
stopped mid-run. Afterwards the server holds every trial each tuner committed, exactly once."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from looptune.tune.database import PostgresDatabase, SQLiteDatabase, record_key
from pg_server import wait_until

ROOT = Path(__file__).resolve().parent.parent
TRIALS = 10


def tune_cmd(shape: str, work: Path, url: str, seed: int) -> list:
    return [sys.executable, "-m", "looptune", "tune", "matmul", "--shape", shape,
            "--trials", str(TRIALS), "--per-iter", "2", "--threads", "1", "--quiet",
            "--work-dir", str(work), "--database", url, "--seed", str(seed)]


def start(cmd) -> subprocess.Popen:
    """A tuner in its own process group (a kill takes its measuring workers too), importing
    this checkout's looptune."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True, cwd=ROOT)


def local_count(work: Path) -> int:
    """Records committed to a work dir's SQLite database so far (0 before it exists)."""
    try:
        with sqlite3.connect(work / "database.sqlite", timeout=10) as conn:
            return conn.execute("SELECT count(*) FROM records").fetchone()[0]
    except sqlite3.Error:
        return 0


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out[-2000:]}\n{err[-3000:]}"
    return out, err


def by_key(records) -> dict:
    out = {}
    for r in records:
        k = record_key(r)
        assert k not in out, "a trial stored twice"
        out[k] = r.to_json()
    return out


@pytest.mark.cc
def test_three_tuners_share_a_server_while_one_is_killed_and_restarted(pg_url, tmp_path):
    shapes = ["M=16,N=16,K=16", "M=16,N=24,K=16", "M=24,N=16,K=8"]  # one workload each
    works = [tmp_path / f"w{i}" for i in range(3)]
    cmds = [tune_cmd(s, w, pg_url, seed=i) for i, (s, w) in enumerate(zip(shapes, works))]
    procs = [start(c) for c in cmds]
    # kill the first mid-run, once it has committed a few trials (of 10)
    assert wait_until(lambda: local_count(works[0]) >= 3 or procs[0].poll() is not None, 90)
    assert procs[0].poll() is None, "it finished before it could be killed"
    os.killpg(procs[0].pid, signal.SIGKILL)
    procs[0].wait()
    killed_at = local_count(works[0])
    assert 3 <= killed_at < TRIALS
    procs[0] = start(cmds[0])  # resumes from its work dir, and sends the server its backlog
    for p in procs:
        finish(p)
    server = by_key(PostgresDatabase(pg_url).get_all_tuning_records())
    local = {}
    for w in works:
        recs = SQLiteDatabase(work_dir=w).get_all_tuning_records()
        assert len(recs) == TRIALS  # the restarted tuner measured only what was left
        local.update(by_key(recs))
    # every trial of every tuner is on the server once, exactly as committed locally
    assert len(local) == 3 * TRIALS
    assert server == local


@pytest.mark.cc
def test_a_run_finishes_locally_when_the_server_stops_then_syncs(postgres, pg_url, tmp_path):
    work = tmp_path / "w"
    proc = start(tune_cmd("M=16,N=16,K=16", work, pg_url, seed=3))
    shared = PostgresDatabase(pg_url)
    try:
        assert wait_until(lambda: len(shared) >= 2 or proc.poll() is not None, 90)
        assert proc.poll() is None, "it finished before the server could be stopped"
        postgres.stop("fast")
        out, err = finish(proc)
    finally:
        postgres.start()
    assert f"matmul(M=16, N=16, K=16): {TRIALS} trials in the database" in out
    away = [line for line in err.splitlines() if "Tuning goes on in the local database" in line]
    assert len(away) == 1, err  # said once, not per record
    assert away[0].startswith("warning: the PostgreSQL server at 127.0.0.1:")
    assert "s3cret-pw" not in err
    waiting = [line for line in err.splitlines() if "of this run are in the local database" in line]
    assert len(waiting) == 1, err
    local = by_key(SQLiteDatabase(work_dir=work).get_all_tuning_records())
    before = by_key(PostgresDatabase(pg_url).get_all_tuning_records())
    assert len(local) == TRIALS and 2 <= len(before) < TRIALS
    assert all(local[k] == v for k, v in before.items())
    push = start([sys.executable, "-m", "looptune", "db", "push", "--work-dir", str(work),
                  "--database", pg_url])
    out, _ = finish(push)
    assert out.startswith(f"pushed {TRIALS - len(before)} record(s) from ")
    assert by_key(PostgresDatabase(pg_url).get_all_tuning_records()) == local
