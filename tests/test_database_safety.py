"""Databases under concurrency, damage and hostile input: several real processes append at
once (one killed, one failing mid-write) and no committed record is lost; a work dir is opened
as what it holds, a missing one is an error; names are printed with their control characters
escaped; absurd stored fields are skipped, never used."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import warnings

import pytest

from looptune import te
from looptune.target import Target
from looptune.te.ops import matmul
from looptune.testing import random_schedule
from looptune.tune.database import Database, JSONDatabase, SQLiteDatabase, TuningRecord
from looptune.tune.error import DatabaseError, DatabaseWarning

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A writer process: commits records {"w": its id, "i": n} for `secs` seconds, printing
# "committed n" after each. mode "fail": after 10 commits one write fails half-way (disk
# full) after a pause in which the others would append; the writer goes on afterwards.
WRITER = r"""
import errno, os, resource, signal, sys, time
sys.path.insert(0, {root!r})
from looptune import te
from looptune.target import Target
from looptune.te.ops import matmul
from looptune.testing import random_schedule
from looptune.tune.database import Database, TuningRecord
from looptune.tune.error import DatabaseError
A, B = te.placeholder((13, 9), name="A"), te.placeholder((9, 17), name="B")
db = Database.create({kind!r}, work_dir={path!r})
wl = db.commit_workload(te.create_prim_func([A, B, matmul(A, B)]))
traces = [random_schedule(wl.func, s).trace for s in range(3)]
real_write = os.write

def half_then_full(fd, data):
    real_write(fd, data[:len(data) // 2])
    time.sleep(0.4)  # the other writers would append now
    raise OSError(errno.ENOSPC, "No space left on device")


def disk_full(on):
    # JSON: os.write fails half-way. SQLite (whose writes os.write does not see): files
    # cannot grow past 1 byte (RLIMIT_FSIZE; EFBIG instead of SIGXFSZ).
    if {kind!r} == "json":
        os.write = half_then_full if on else real_write
    else:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 if on else resource.RLIM_INFINITY,
                                                   resource.RLIM_INFINITY))

print("ready", flush=True)
sys.stdin.readline()  # start together
end = time.time() + {secs}
i = 0
while time.time() < end:
    if {mode!r} == "fail" and i == 10:
        disk_full(True)
        try:
            db.commit_tuning_record(TuningRecord(wl, traces[0], (1.0,), Target(),
                                                 measure={{"w": {wid}, "i": -1}}))
            print("unexpected: the failing write was committed", flush=True)
        except DatabaseError as e:
            print("failed", str(e).replace("\n", " "), flush=True)
        disk_full(False)
    db.commit_tuning_record(TuningRecord(wl, traces[i % 3], (1e-3 + i * 1e-6,), Target(),
                                         measure={{"w": {wid}, "i": i, "pad": "x" * (i % 3000)}}))
    print("committed", i, flush=True)
    i += 1
    time.sleep(0.002)
"""


def _writers(kind, path, modes, secs=2.0):
    procs = [subprocess.Popen([sys.executable, "-c", WRITER.format(
        root=ROOT, kind=kind, path=str(path), wid=w, mode=mode, secs=secs)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w, mode in enumerate(modes)]
    for p in procs:
        line = p.stdout.readline()
        assert line.strip() == "ready", line + p.stderr.read()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    return procs


def _committed(out) -> set:
    return {int(x.split()[1]) for x in out.splitlines() if x.startswith("committed ")}


def _run_writers(kind, path, kill_after=0.8):
    """Three writers at once: one plain, one whose write fails half-way, one SIGKILLed
    mid-run. Returns {writer: set of committed i} and the failing writer's output."""
    procs = _writers(kind, path, ["plain", "fail", "kill"])
    time.sleep(kill_after)
    procs[2].send_signal(signal.SIGKILL)
    outs = [p.communicate(timeout=120) for p in procs]
    assert procs[0].returncode == 0 and procs[1].returncode == 0, [o[1] for o in outs]
    assert procs[2].returncode == -signal.SIGKILL
    return {w: _committed(o[0]) for w, o in enumerate(outs)}, outs[1][0]


def _read_all(kind, path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        db = Database.create(kind, work_dir=str(path))
        recs = db.get_all_tuning_records()
    return recs, [str(w.message) for w in caught if issubclass(w.category, DatabaseWarning)]


@pytest.mark.parametrize("kind", ["json", "sqlite"])
def test_concurrent_writers_with_a_failed_and_a_killed_one_lose_no_committed_record(kind, tmp_path):
    committed, fail_out = _run_writers(kind, tmp_path)
    assert "failed" in fail_out and "unexpected" not in fail_out, fail_out
    assert all(len(c) > 10 for c in committed.values()), {w: len(c) for w, c in committed.items()}
    recs, msgs = _read_all(kind, tmp_path)
    stored = [(r.measure["w"], r.measure["i"]) for r in recs]
    assert len(stored) == len(set(stored))  # nothing doubled
    for w, got in committed.items():
        lost = got - {i for ww, i in stored if ww == w}
        assert not lost, f"writer {w} lost {len(lost)} committed records"
    assert (1, -1) not in stored  # the failed commit is not there, half or whole
    assert len(msgs) <= 2, msgs  # at most the failed and the killed writer's partial lines
    # the partial lines do not stop a later writer or reader
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DatabaseWarning)
        db = Database.create(kind, work_dir=str(tmp_path))
        wl = db.commit_workload(recs[0].workload.func)
    db.commit_tuning_record(TuningRecord(wl, recs[0].trace, (2e-3,), Target(), measure={"w": 9}))
    recs2, msgs2 = _read_all(kind, tmp_path)
    assert len(recs2) == len(recs) + 1 and recs2[-1].measure == {"w": 9} and msgs2 == msgs


BIG_WRITER = r"""
import sys
sys.path.insert(0, {root!r})
from looptune import te
from looptune.target import Target
from looptune.te.ops import matmul
from looptune.testing import random_schedule
from looptune.tune.database import JSONDatabase, TuningRecord
A, B = te.placeholder((13, 9), name="A"), te.placeholder((9, 17), name="B")
db = JSONDatabase({path!r})
wl = db.commit_workload(te.create_prim_func([A, B, matmul(A, B)]))
trace = random_schedule(wl.func, 0).trace
print("ready", flush=True)
for i in range({n}):
    db.commit_tuning_record(TuningRecord(wl, trace, (1e-3,), Target(),
                                         measure={{"i": i, "pad": "x" * (8 << 20)}}))
"""


def test_json_readers_never_see_half_a_record(tmp_path):
    """Records of 8 MB each are appended while this process reads the file over and over:
    every read sees whole records only (no partial line), in order."""
    p = subprocess.Popen([sys.executable, "-c", BIG_WRITER.format(root=ROOT, path=str(tmp_path),
                                                                  n=12)],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        counts = []
        while p.poll() is None or not counts or counts[-1] < 12:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = [r.measure["i"] for r in JSONDatabase(tmp_path).get_all_tuning_records()]
            assert not caught, [str(w.message)[:200] for w in caught]
            assert got == list(range(len(got)))
            counts.append(len(got))
            if p.poll() is not None and p.returncode != 0:
                break
        assert p.returncode == 0 and counts[-1] == 12
    finally:
        p.kill()
        p.wait()
