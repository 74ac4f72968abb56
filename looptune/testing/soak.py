"""Tuning runs under stress, each a subprocess that tunes a small matmul into a work dir and
prints a line for every record once it is committed: killed with SIGKILL at random moments
and resumed (the kill soak), sharing one database, on a disk that fills up, or waiting for a
database that another process holds locked.

    python -m looptune.testing.soak --kills 20 [--seed 0] [--work-dir D]

The last line reads `soak: N kills, M records lost, K failed opens`; the exit status is 1
unless the soak made all its kills and M and K are 0. Used by tests/test_resume.py,
tests/test_faults.py and benchmarks/reliability.py."""
from __future__ import annotations

import argparse
import os
import random
import resource
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..tune.database.sqlite import DEFAULT_FILE, SQLiteDatabase

ROOT = str(Path(__file__).resolve().parents[2])  # so that an uninstalled checkout works
UNREACHABLE = 1_000_000  # the trial budget of a run that is going to be killed


def record_key(rec) -> str:
    """A record's identity across processes: its schedule and the time it was made."""
    return f"{rec.sch_hash}@{rec.time!r}"


class AnnouncingDatabase(SQLiteDatabase):
    """An SQLiteDatabase that prints `committed <key>` once a record is committed; with
    `full_after`, the disk is full after that many commits (the files of this process may
    not grow any more: RLIMIT_FSIZE)."""

    def __init__(self, *args, full_after: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.full_after = full_after
        self.commits = 0

    def commit_tuning_record(self, record) -> None:
        super().commit_tuning_record(record)
        print(f"committed {record_key(record)}", flush=True)
        self.commits += 1
        if self.commits == self.full_after:
            wal = Path(f"{self.path}-wal")
            size = max(self.path.stat().st_size, wal.stat().st_size if wal.exists() else 0)
            resource.setrlimit(resource.RLIMIT_FSIZE,
                               (size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def child(argv) -> None:
    """The tuning run (in its own process)."""
    ap = argparse.ArgumentParser(prog="soak child")
    ap.add_argument("work_dir")
    ap.add_argument("--trials", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shape", default="24,32,16", help="M,N,K of the matmul")
    ap.add_argument("--full-after", type=int, default=None)
    ap.add_argument("--db-timeout", type=float, default=60.0)
    args = ap.parse_args(argv)
    from .. import te
    from ..te.ops import workload
    from ..tune import EvaluatorConfig, tune_tir
    m, n, k = (int(x) for x in args.shape.split(","))
    func = te.create_prim_func(workload("matmul", M=m, N=n, K=k)[0])
    db = AnnouncingDatabase(work_dir=args.work_dir, timeout=args.db_timeout,
                            full_after=args.full_after)
    print("opened", flush=True)
    tune_tir(func, "cpu", database=db, max_trials_global=args.trials, num_trials_per_iter=4,
             seed=args.seed, evaluator=EvaluatorConfig(num_threads=1, repeat=2, min_repeat_ms=1),
             progress=False)
    print("finished", flush=True)


class TuningProcess:
    """A tuning run in a subprocess; its output goes to files in `log_dir`."""

    def __init__(self, work_dir, log_dir, *, trials: int, seed: int = 0, shape="24,32,16",
                 full_after: int | None = None, db_timeout: float = 60.0, tag: str = "run"):
        cmd = [sys.executable, "-m", "looptune.testing.soak", "child", str(work_dir),
               "--trials", str(trials), "--seed", str(seed), "--shape", shape,
               "--db-timeout", str(db_timeout)]
        if full_after is not None:
            cmd += ["--full-after", str(full_after)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
        self.out = Path(log_dir) / f"{tag}.out"
        self.err = Path(log_dir) / f"{tag}.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         env=env)

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def committed(self) -> list:
        """The keys of the records this run said it committed."""
        return [ln.split()[1] for ln in self.out.read_text().splitlines()
                if ln.startswith("committed ")]

    def stderr_tail(self, lines: int = 15) -> str:
        return "\n".join(self.err.read_text().splitlines()[-lines:])


@dataclass
class Snapshot:
    """What a fresh process finds in a work dir's database."""

    keys: list = field(default_factory=list)       # record_key of every record, in order
    sch_hashes: list = field(default_factory=list)
    skipped: list = field(default_factory=list)    # warnings about rows that did not load
    error: str | None = None                       # the database did not open or read
    integrity: str = ""                            # PRAGMA integrity_check


def snapshot(work_dir) -> Snapshot:
    path = Path(work_dir) / DEFAULT_FILE
    snap = Snapshot()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            db = SQLiteDatabase(path, timeout=10)
            try:
                records = db.get_all_tuning_records()
            finally:
                db.close()
        snap.skipped = [str(w.message) for w in caught]
        snap.keys = [record_key(r) for r in records]
        snap.sch_hashes = [r.sch_hash for r in records]
        conn = sqlite3.connect(path, timeout=10)
        try:
            snap.integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        finally:
            conn.close()
    except Exception as e:  # noqa: BLE001 - reported: the database did not open
        snap.error = f"{type(e).__name__}: {e}"
    return snap


@dataclass
class SoakReport:
    """What a soak run found: kills, records lost, failed opens and the state of the database at
    the end; `ok` says all is well."""

    kills: int = 0
    kills_while_tuning: int = 0   # kills of a run that had committed records of its own
    lost: int = 0                 # records committed (seen in the database, or announced
    #                               by their run) and missing afterwards
    opens: int = 0                # times the database was opened after a kill
    failed_opens: list = field(default_factory=list)
    skipped: list = field(default_factory=list)     # rows that did not load
    not_ok: list = field(default_factory=list)      # integrity_check answers other than "ok"
    trials: int = 0               # the budget of the last run: the records it must leave
    final_records: int = 0
    duplicates: int = 0           # schedules measured twice
    finished: bool = False        # the resumed run completed the budget
    error: str = ""
    secs: float = 0.0

    @property
    def ok(self) -> bool:
        return (self.finished and not self.lost and not self.failed_opens and not self.skipped
                and not self.not_ok and not self.duplicates and self.final_records == self.trials)


def kill_soak(work_dir, *, kills: int = 20, seed: int = 0, extra_trials: int = 8,
              min_delay_s: float = 0.3, max_delay_s: float = 8.0,
              timeout_s: float = 900.0) -> SoakReport:
    """Start a tuning run in `work_dir`, SIGKILL it, check the database, resume; `kills`
    times. Every other kill comes at a random moment of the run, the others just after one
    of its first commits (records are committed in bursts, one per measured batch). A last
    run then gets a budget of `extra_trials` more than the database holds, and must finish it
    (the killed runs have a budget they cannot reach)."""
    work_dir = Path(work_dir)
    logs = work_dir / "soak-logs"
    logs.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    report = SoakReport()
    t0 = time.monotonic()
    seen: set = set()

    def check(run: TuningProcess) -> None:
        snap = snapshot(work_dir)
        report.opens += 1
        if snap.error:
            report.failed_opens.append(snap.error)
            return
        now = set(snap.keys)
        report.lost += len((seen | set(run.committed())) - now)
        report.skipped += snap.skipped
        if snap.integrity != "ok":
            report.not_ok.append(snap.integrity)
        seen.update(now)

    for i in range(kills):
        run = TuningProcess(work_dir, logs, trials=UNREACHABLE, seed=seed, tag=f"run{i}")
        if i % 2:
            _wait_for_commits(run, rng.randint(1, 8), timeout_s)
            time.sleep(rng.uniform(0.0, 0.02))
        else:
            time.sleep(rng.uniform(min_delay_s, max_delay_s))
        if run.proc.poll() is not None:
            report.error = f"run {i} exited by itself (exit {run.proc.returncode}):\n" \
                           f"{run.stderr_tail()}"
            return report
        run.kill()
        report.kills += 1
        report.kills_while_tuning += bool(run.committed())
        if (work_dir / DEFAULT_FILE).exists():
            check(run)
    report.trials = len(seen) + extra_trials
    run = TuningProcess(work_dir, logs, trials=report.trials, seed=seed, tag="final")
    try:
        rc = run.wait(timeout_s)
    except subprocess.TimeoutExpired:
        run.kill()
        rc = None
    if rc != 0:
        report.error = f"the resumed run failed (exit {rc}):\n{run.stderr_tail()}"
    check(run)
    final = snapshot(work_dir)
    report.final_records = len(final.keys)
    report.duplicates = len(final.sch_hashes) - len(set(final.sch_hashes))
    report.finished = not report.error and report.final_records == report.trials
    report.secs = time.monotonic() - t0
    return report


def _wait_for_commits(run: TuningProcess, n: int, timeout_s: float) -> None:
    """Until `run` has announced `n` commits (or exited, or `timeout_s` passed)."""
    deadline = time.monotonic() + timeout_s
    while (len(run.committed()) < n and run.proc.poll() is None
           and time.monotonic() < deadline):
        time.sleep(0.002)


@contextmanager
def write_lock(path, seconds: float):
    """Another process holds an exclusive transaction on the SQLite file `path` for
    `seconds` (from when this context is entered)."""
    script = textwrap.dedent(f"""\
        import sqlite3, time
        c = sqlite3.connect({str(path)!r}, isolation_level=None)
        c.execute("BEGIN EXCLUSIVE")
        c.execute("INSERT OR REPLACE INTO meta VALUES ('held', 'by another process')")
        print("held", flush=True)
        time.sleep({seconds!r})
        c.execute("ROLLBACK")
        """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        if proc.stdout.readline().strip() != "held":
            raise RuntimeError(f"the lock holder did not start (exit {proc.wait()})")
        yield proc
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


@dataclass
class StorageCheck:
    """One storage fault and whether looptune handled it as it must."""

    kind: str
    ok: bool
    detail: str


def _last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def disk_full(work_dir, *, full_after: int = 6, trials: int = 12,
              timeout_s: float = 600.0) -> StorageCheck:
    """A run whose disk fills up after `full_after` commits must stop with a DatabaseError
    that says so and keep every record it committed; a run started after space was freed
    resumes and finishes its budget of `trials`."""
    work_dir = Path(work_dir)
    logs = work_dir / "soak-logs"
    logs.mkdir(parents=True, exist_ok=True)
    run = TuningProcess(work_dir, logs, trials=trials, full_after=full_after, tag="full")
    rc = run.wait(timeout_s)
    error = _last_line(run.err.read_text())
    committed = run.committed()
    snap = snapshot(work_dir)
    stopped = (rc != 0 and error.startswith("looptune.tune.error.DatabaseError")
               and "is the disk full?" in error)
    kept = (not snap.error and set(snap.keys) == set(committed)
            and len(committed) == full_after and snap.integrity == "ok" and not snap.skipped)
    again = TuningProcess(work_dir, logs, trials=trials, tag="after-full")
    rc2 = again.wait(timeout_s)
    final = snapshot(work_dir)
    resumed = rc2 == 0 and len(final.keys) == trials and set(committed) <= set(final.keys)
    return StorageCheck("disk full", stopped and kept and resumed,
                        f"{len(committed)} records committed, then (exit {rc}) {error!r}; "
                        f"{len(snap.keys)} in the database (integrity {snap.integrity}); "
                        f"resumed: exit {rc2}, {len(final.keys)} of {trials} records")


def shared_database(work_dir, *, trials: int = 8,
                    shapes=("24,32,16", "16,24,32")) -> StorageCheck:
    """Tuning runs of different workloads at the same time, into one database: all finish,
    and every record each committed is there, undamaged."""
    work_dir = Path(work_dir)
    logs = work_dir / "soak-logs"
    logs.mkdir(parents=True, exist_ok=True)
    runs = [TuningProcess(work_dir, logs, trials=trials, shape=shape, seed=i, tag=f"shared{i}")
            for i, shape in enumerate(shapes)]
    codes = [r.wait(600) for r in runs]
    snap = snapshot(work_dir)
    committed = [r.committed() for r in runs]
    present = all(set(c) <= set(snap.keys) for c in committed)
    ok = (codes == [0] * len(runs) and present and len(snap.keys) == trials * len(runs)
          and snap.integrity == "ok" and not snap.skipped and not snap.error)
    return StorageCheck("shared database", ok,
                        f"{len(runs)} runs, exit codes {codes}, committed "
                        f"{[len(c) for c in committed]}, {len(snap.keys)} records in the "
                        f"database (integrity {snap.integrity or snap.error})")


def locked_database(work_dir, *, timeout_s: float = 1.0, hold_s: float = 2.0) -> StorageCheck:
    """A database another process holds locked: a tuning run waits for it (up to its
    timeout) and then goes on; one that would wait longer stops with a DatabaseError that
    says the database is locked."""
    from ..tune import EvaluatorConfig, tune_tir
    from ..tune.error import DatabaseError
    from .faults import matmul_func
    path = Path(work_dir) / DEFAULT_FILE
    SQLiteDatabase(path).close()
    with write_lock(path, hold_s):
        t0 = time.monotonic()
        db = SQLiteDatabase(path, timeout=hold_s + 30)
        waited = time.monotonic() - t0
        tune_tir(matmul_func(), "cpu", database=db, max_trials_global=4, num_trials_per_iter=4,
                 seed=0, evaluator=EvaluatorConfig(num_threads=1, repeat=2, min_repeat_ms=1),
                 progress=False)
        tuned = len(db)
        db.close()
    waits = tuned == 4 and waited >= hold_s * 0.9
    with write_lock(path, timeout_s + 30):
        t0 = time.monotonic()
        try:
            SQLiteDatabase(path, timeout=timeout_s).close()
            error = "none"
        except DatabaseError as e:
            error = str(e)
        gave_up = time.monotonic() - t0
    clear = "is locked" in error and gave_up < timeout_s + 5
    return StorageCheck("database locked", waits and clear,
                        f"waited {waited:.1f} s for a {hold_s:g} s lock, then tuned {tuned} "
                        f"records; a {timeout_s + 30:g} s lock: gave up after {gave_up:.1f} s "
                        f"with {error!r}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["child"]:
        child(argv[1:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-delay", type=float, default=8.0,
                    help="seconds before a kill at a random moment, at most")
    ap.add_argument("--work-dir", default=None, help="default: a new temporary directory")
    args = ap.parse_args(argv)
    work = args.work_dir or tempfile.mkdtemp(prefix="looptune-soak-")
    r = kill_soak(work, kills=args.kills, seed=args.seed, max_delay_s=args.max_delay)
    print(f"work dir {work}: {r.kills} kills ({r.kills_while_tuning} while tuning), "
          f"{r.opens} opens, {r.final_records} of {r.trials} records at the end, "
          f"{r.duplicates} measured twice, {len(r.skipped)} rows skipped, {r.secs:.0f} s")
    if r.error:
        print(r.error)
    print(f"soak: {r.kills} kills, {r.lost} records lost, {len(r.failed_opens)} failed opens")
    return 0 if r.ok and r.kills == args.kills else 1


if __name__ == "__main__":
    raise SystemExit(main())
