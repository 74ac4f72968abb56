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

HOST = Target.create("cpu")
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


def _run_writers(kind, path, kill_after=1.2):
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
    assert len(committed[0]) > 10 and len(committed[1]) > 10 and committed[2], \
        {w: len(c) for w, c in committed.items()}
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


# --------------------------------------------------------------------- which database a work dir holds
def mm_func(name="mm"):
    A, B = te.placeholder((13, 9), name="A"), te.placeholder((9, 17), name="B")
    return te.create_prim_func([A, B, matmul(A, B)], name=name)


def commit_some(db, func, n=3, seed=0, **measure):
    """n successful records with real traces and random times; returns them."""
    rng = random.Random(seed)
    wl = db.commit_workload(func)
    recs = [TuningRecord(wl, random_schedule(func, seed + i).trace,
                         (rng.uniform(1e-4, 1e-2),), HOST, measure={"i": i, **measure})
            for i in range(n)]
    for r in recs:
        db.commit_tuning_record(r)
    return recs


def safety_mm():
    A, B = te.placeholder((13, 9), name="A"), te.placeholder((9, 17), name="B")
    return [A, B, matmul(A, B)]


def _task():
    from looptune.tune import Task
    return Task(safety_mm)


@pytest.mark.parametrize("kind, other", [("json", "sqlite"), ("sqlite", "json")])
def test_a_work_dir_is_opened_as_what_it_holds_never_hidden_by_a_new_one(kind, other, tmp_path):
    recs = commit_some(Database.create(kind, work_dir=str(tmp_path)), _task().func)
    files = sorted(os.listdir(tmp_path))
    with pytest.raises(DatabaseError) as e:
        Database.create(other, work_dir=str(tmp_path))
    names = {"json": "a JSON", "sqlite": "an SQLite"}
    assert f"{tmp_path} holds {names[kind]} tuning database" in str(e.value)
    assert f"not {names[other]} one" in str(e.value) and f"database='{kind}'" in str(e.value)
    assert sorted(os.listdir(tmp_path)) == files  # nothing created beside it
    # reading with a work dir (no format asked for) finds the records, whatever the kind
    best = _task().best_record(str(tmp_path))
    assert best is not None and best.median_secs == min(r.median_secs for r in recs)
    assert sorted(os.listdir(tmp_path)) == files


def test_a_work_dir_holding_both_kinds_is_read_as_both_and_not_tuned_into(tmp_path):
    from looptune.tune import tune_tir
    from looptune.tune.database import UnionDatabase, open_work_dir
    func = _task().func
    in_json = commit_some(JSONDatabase(tmp_path), func, n=2, seed=0)
    # what an older looptune did: a new SQLite database beside the JSON one
    in_sqlite = commit_some(SQLiteDatabase(tmp_path / "database.sqlite"), func, n=2, seed=5)
    with pytest.warns(DatabaseWarning, match="holds both an SQLite .* and a JSON"):
        db = open_work_dir(tmp_path)
    assert isinstance(db, UnionDatabase) and len(db) == 4
    with pytest.warns(DatabaseWarning, match="reading the records of both"):
        best = _task().best_record(str(tmp_path))
    assert best.median_secs == min(r.median_secs for r in in_json + in_sqlite)
    with pytest.raises(DatabaseError, match="holds both .* pass database='sqlite' or 'json'"):
        tune_tir(func, "cpu", str(tmp_path), max_trials_global=2, progress=False)


def test_reading_records_from_a_missing_or_empty_work_dir_is_an_error_naming_it(tmp_path):
    from looptune.graph import compile_model
    from looptune.tune.database import open_work_dir
    onnx = pytest.importorskip("onnx")
    from test_frontend_onnx import mlp_gemm
    from looptune.frontend.onnx import from_onnx
    model = tmp_path / "mlp.onnx"
    onnx.save(mlp_gemm()[0], str(model))
    missing, empty = tmp_path / "wrok", tmp_path / "empty"
    empty.mkdir()
    for d in (missing, empty):
        for read in (open_work_dir, lambda d: _task().best_record(str(d)),
                     lambda d: compile_model(from_onnx(str(model)), str(d))):
            with pytest.raises(DatabaseError, match=f"no tuning database in {d}"):
                read(d)
        assert not missing.exists() and os.listdir(empty) == []


def test_cli_commands_that_read_records_refuse_a_missing_work_dir(tmp_path, capsys):
    from looptune.cli import main
    onnx = pytest.importorskip("onnx")
    from test_frontend_onnx import mlp_gemm
    model = tmp_path / "mlp.onnx"
    onnx.save(mlp_gemm()[0], str(model))
    missing = str(tmp_path / "wrok")
    for argv in (["run", str(model), "--work-dir", missing], ["db", "list", "--work-dir", missing],
                 ["db", "best", "mm", "--work-dir", missing], ["report", missing]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"no tuning database in {missing}: that work dir does not exist" in err, \
            (argv, err)
    assert not os.path.exists(missing)


@pytest.mark.cc
def test_tuning_says_it_created_a_database_and_adds_to_a_json_one(tmp_path, capsys):
    from looptune.tune import EvaluatorConfig, tune_tir
    func = _task().func
    quick = EvaluatorConfig(num_threads=1, repeat=1, min_repeat_ms=1)
    fresh = tmp_path / "new"
    tune_tir(func, "cpu", str(fresh), max_trials_global=2, num_trials_per_iter=2,
             strategy="replay-trace", seed=0, evaluator=quick)
    assert f"no tuning database in {fresh} yet: created SQLiteDatabase" in capsys.readouterr().err
    jdir = tmp_path / "j"
    before = len(commit_some(JSONDatabase(jdir), func))
    with pytest.warns(DatabaseWarning, match="holds a JSON tuning database: tuning adds to it"):
        db = tune_tir(func, "cpu", str(jdir), max_trials_global=before + 2,
                      num_trials_per_iter=2, strategy="replay-trace", seed=0, evaluator=quick)
    assert isinstance(db, JSONDatabase) and not (jdir / "database.sqlite").exists()
    assert len(JSONDatabase(jdir)) > before  # resumed from the JSON records, added to them


# --------------------------------------------------------------------- hostile names
EVIL = "mm\x1b[2J\x1b]0;pwned\x07\u202e"


def _evil_db(tmp_path):
    db = SQLiteDatabase(work_dir=str(tmp_path))
    func = mm_func(EVIL)
    commit_some(db, func, run={"task": f"task {EVIL}", "id": "r1", "strategy": "replay-trace",
                               "seed": 0, "start": 0.0})
    wl = db.commit_workload(func)
    db.commit_tuning_record(TuningRecord(wl, random_schedule(func, 9).trace, None, Target(),
                                         error_class="run_error", error_msg=f"boom {EVIL}",
                                         measure={"i": 9}))
    return db


def _assert_escaped(text):
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, repr(text)
    assert "\\x1b[2J" in text, text


def test_names_with_terminal_escapes_are_printed_escaped(tmp_path, capsys):
    from looptune.cli import main
    from looptune.report import collect, summary
    db = _evil_db(tmp_path)
    key = db.get_all_tuning_records()[0].workload.key
    for argv in (["db", "list"], ["db", "show", key[:8]], ["db", "best", key[:8]],
                 ["report", str(tmp_path)], ["db", "best", "nothing"]):
        main([*argv, "--work-dir", str(tmp_path)] if argv[0] == "db" else argv)
        out = capsys.readouterr()
        _assert_escaped(out.out + out.err)
    _assert_escaped(summary(collect(db)))


def test_progress_lines_escape_task_names():
    import io
    from looptune.tune.progress import Progress
    stream = io.StringIO()
    p = Progress(10, None, stream=stream)
    p.update(task=EVIL, done=1, best_secs=1e-3, flops=None, failures=0, force=True)
    p.note(f"{EVIL}: no default schedule\nsecond line")
    text = stream.getvalue()
    _assert_escaped(text)
    assert text.count("\n") == 3  # the note keeps its own line break


# --------------------------------------------------------------------- absurd stored fields
ABSURD = [  # (field path, value): what no looptune writes
    (("measure", "num_threads"), 10**9), (("measure", "num_threads"), 0),
    (("measure", "num_threads"), "4"), (("measure", "num_threads"), 2.5),
    (("measure",), [1, 2]), (("measure", "calls_from"), "gpu"),
    (("measure", "repeat"), -3), (("measure", "min_repeat_ms"), float("nan")),
    (("run_secs",), [-1e-3]), (("run_secs",), [float("nan")]), (("run_secs",), [0.0]),
    (("run_secs",), ["fast"]), (("run_secs",), 1e-3), (("run_secs",), [True]),
    (("time",), float("nan")), (("time",), -5.0), (("time",), "yesterday"),
    (("error_class",), "fast"), (("error_msg",), {"x": 1}), (("sch_hash",), 7),
    (("args_info",), "A,B,C"), (("args_info",), [{"name": "A", "shape": [-1], "dtype": "f"}]),
]


def _forge(obj, path, value):
    obj = json.loads(json.dumps(obj))
    d = obj
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    return obj


@pytest.mark.parametrize("kind", ["json", "sqlite"])
def test_records_with_absurd_fields_are_skipped_with_a_warning_never_used(kind, tmp_path):
    import sqlite3
    func = mm_func()
    good = commit_some(Database.create(kind, work_dir=str(tmp_path)), func, n=3,
                       num_threads=1)
    # each forged record claims to be by far the fastest
    template = dict(good[0].to_json(), run_secs=[1e-9])
    forged = [json.dumps(_forge(template, path, value)) for path, value in ABSURD]
    if kind == "json":
        with open(tmp_path / "database_tuning_record.json", "a") as f:
            f.write("".join(line + "\n" for line in forged))
    else:
        with sqlite3.connect(tmp_path / "database.sqlite") as c:
            c.executemany("INSERT INTO records (workload, target, median_secs, error_class, time,"
                          " record) VALUES (?, '', 1e-9, NULL, 0, ?)",
                          [(template["workload"], line) for line in forged])
    recs, msgs = _read_all(kind, tmp_path)
    assert sorted(r.measure["i"] for r in recs) == [0, 1, 2]
    text = "\n".join(msgs)
    assert len(msgs) == 10 + 1  # MAX_WARNINGS one by one, then a summary of the rest
    for field in ("measure.num_threads", "measure must be an object", "measure.calls_from",
                  "measure.repeat", "measure.min_repeat_ms", "run_secs"):
        assert field in text, (field, text)
    db = Database.create(kind, work_dir=str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DatabaseWarning)
        best = db.query_tuning_record(func, HOST, k=5)
    assert [r.median_secs for r in best] == sorted(r.median_secs for r in good)


@pytest.mark.parametrize("path, value", ABSURD, ids=[f"{'.'.join(p)}={v!r}" for p, v in ABSURD])
def test_each_absurd_field_is_refused_naming_it(path, value):
    wl_func = mm_func()
    from looptune.tune.database import Workload, workload_key
    wl = Workload(wl_func, workload_key(wl_func))
    obj = _forge(TuningRecord(wl, random_schedule(wl_func, 0).trace, (1e-3,), Target(),
                              measure={"num_threads": 1}).to_json(), path, value)
    with pytest.raises(ValueError, match=path[-1] if path[-1] != "measure" else "measure"):
        TuningRecord.from_json(obj, wl)
