"""Databases: every implementation commits and answers the same way (top-k order, failures,
targets, best schedule), the files survive reopening, corruption and SIGKILL mid-write,
unions combine, and anchor-block keys let a fused variant reuse the plain kernel's records."""
from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
import warnings

import pytest

from looptune import te
from looptune.schedule import Schedule
from looptune.target import Target
from looptune.te.ops import matmul, relu
from looptune.tir.anchor import anchor_block, anchor_key
from looptune.tir.structural import structural_equal, structural_hash
from looptune.tune.database import (Database, JSONDatabase, OrderedUnionDatabase,
                                    SQLiteDatabase, ScheduleFnDatabase, TuningRecord,
                                    UnionDatabase, workload_key)
from looptune.testing import random_schedule
from workloads_small import small_workload

HOST = Target.create("cpu")
OTHER = Target(kind="cpu", arch="riscv64", features=("v",), cores=3)
STORING = ["memory", "json", "sqlite"]
ALL = STORING + ["union", "ordered-union", "schedule-fn"]


def open_db(kind, path, **kw) -> Database:
    if kind == "memory":
        return Database.create("memory", **kw)
    if kind == "json":
        return Database.create("json", work_dir=path, **kw)
    if kind == "sqlite":
        return Database.create("sqlite", work_dir=path, **kw)
    if kind in ("union", "ordered-union"):
        return Database.create(kind)  # takes its members positionally; none here
    if kind == "schedule-fn":
        return Database.create(kind, fn=lambda sch: False)
    raise ValueError(kind)


def mm_func(M=13, N=17, K=9, *, with_relu=False, names=("A", "B")):
    A = te.placeholder((M, K), name=names[0])
    B = te.placeholder((K, N), name=names[1])
    C = matmul(A, B)
    return te.create_prim_func([A, B, relu(C) if with_relu else C])


def changing_schedules(func, n, seed):
    """n schedules of func whose traces change the function (different seeds)."""
    out, s = [], seed
    while len(out) < n:
        sch = random_schedule(func, s)
        s += 1
        if not structural_equal(sch.func, func):
            out.append(sch)
    return out


def make_records(wl, rng, n_ok=6, n_fail=3, target=HOST):
    """Records of real traces with random run times, and failures (interleaved randomly)."""
    recs = []
    for i, sch in enumerate(changing_schedules(wl.func, n_ok + n_fail, rng.randrange(1000))):
        if i < n_ok:
            secs = tuple(rng.uniform(1e-4, 1e-2) for _ in range(rng.randint(1, 3)))
            recs.append(TuningRecord(wl, sch.trace, secs, target, measure={"i": i}))
        else:
            recs.append(TuningRecord(wl, sch.trace, None, target, error_class="run_error",
                                     error_msg=f"boom {i}", measure={"i": i}))
    rng.shuffle(recs)
    return recs


def replay(func, trace):
    sch = Schedule(func, seed=0)
    trace.apply_to_schedule(sch)
    return sch.func


@pytest.fixture(params=[0, 1, 2])
def rng(request):
    return random.Random(1000 + request.param)


# --------------------------------------------------------------------- every implementation
@pytest.mark.parametrize("kind", ALL)
def test_created_by_name(kind, tmp_path):
    db = open_db(kind, tmp_path)
    assert isinstance(db, Database) and len(db) == 0 and db.get_all_tuning_records() == []
    assert db.registered_name == kind
    assert Database.create(db) is db
    assert db.query_tuning_record(mm_func(), HOST) == [] and db.query_schedule(mm_func(), HOST) is None
    db.close()


@pytest.mark.parametrize("kind", STORING)
def test_commit_and_top_k(kind, tmp_path, rng):
    db = open_db(kind, tmp_path)
    func = mm_func()
    assert not db.has_workload(func)
    wl = db.commit_workload(func)
    assert wl.key == structural_hash(func) == workload_key(func) and db.has_workload(func)
    assert db.commit_workload(func).key == wl.key
    recs = make_records(wl, rng)
    for r in recs:
        db.commit_tuning_record(r)
    assert len(db) == len(recs) == len(db.get_all_tuning_records())
    assert [r.measure["i"] for r in db.get_all_tuning_records()] == [r.measure["i"] for r in recs]
    ok = sorted((r for r in recs if r.ok), key=lambda r: r.median_secs)
    for k in (1, 3, 100):
        top = db.get_top_k(wl, k)
        assert [r.measure["i"] for r in top] == [r.measure["i"] for r in ok[:k]]
        assert all(r.ok and r.error_class is None for r in top)
    failed = [r for r in db.records_of(wl) if not r.ok]
    assert sorted(r.error_msg for r in failed) == sorted(r.error_msg for r in recs if not r.ok)
    assert all(r.error_class == "run_error" and r.run_secs is None for r in failed)
    db.close()


@pytest.mark.parametrize("kind", STORING)
def test_targets_are_kept_apart(kind, tmp_path, rng):
    db = open_db(kind, tmp_path)
    wl = db.commit_workload(mm_func())
    host = make_records(wl, rng, 3, 1, HOST)
    other = make_records(wl, rng, 3, 1, OTHER)
    for r in host + other:
        db.commit_tuning_record(r)
    assert len(db) == 8
    for target, mine in ((HOST, host), (OTHER, other)):
        got = db.get_top_k(wl, 10, target)
        assert len(got) == 3 and all(r.target.key() == target.key() for r in got)
        best = min((r for r in mine if r.ok), key=lambda r: r.median_secs)
        top = db.query_tuning_record(wl.func, target)
        assert [r.measure["i"] for r in top] == [best.measure["i"]]
        assert top[0].median_secs == best.median_secs
    assert len(db.get_top_k(wl, 10)) == 6
    db.close()


@pytest.mark.parametrize("kind", STORING)
def test_query_schedule_applies_the_best_record(kind, tmp_path, rng):
    db = open_db(kind, tmp_path)
    func = mm_func()
    wl = db.commit_workload(func)
    recs = make_records(wl, rng)
    for r in recs:
        db.commit_tuning_record(r)
    best = min((r for r in recs if r.ok), key=lambda r: r.median_secs)
    want = replay(func, best.trace)
    sch = db.query_schedule(func, HOST)
    assert structural_equal(sch.func, want)
    assert sch.trace.to_json()["insts"] == best.trace.to_json()["insts"]
    assert structural_equal(db.query_ir_module(func, HOST), want)
    # not any record would do: the others give other functions
    others = [r for r in recs if r.ok and r is not best]
    assert any(not structural_equal(replay(func, r.trace), want) for r in others)
    # another workload and another target find nothing
    assert db.query_schedule(mm_func(13, 17, 10), HOST) is None
    assert db.query_ir_module(func, Target(kind="cpu", arch="nowhere")) is None
    db.close()


# --------------------------------------------------------------------- files
@pytest.mark.parametrize("kind", ["json", "sqlite"])
def test_persistence_across_reopen(kind, tmp_path, rng):
    func = mm_func()
    db = open_db(kind, tmp_path)
    wl = db.commit_workload(func)
    recs = make_records(wl, rng)
    for r in recs[:5]:
        db.commit_tuning_record(r)
    db.close()
    db = open_db(kind, tmp_path)
    assert db.has_workload(func) and len(db) == 5
    for r in recs[5:]:  # keep appending after a reopen
        db.commit_tuning_record(r)
    db.close()
    db = open_db(kind, tmp_path)
    got = db.get_all_tuning_records()
    assert len(got) == len(recs)
    for a, b in zip(got, recs):
        assert a.trace.to_json() == b.trace.to_json()
        assert (a.run_secs, a.error_class, a.error_msg, a.time, a.measure) == \
               (b.run_secs, b.error_class, b.error_msg, b.time, b.measure)
        assert a.target == b.target
    stored = got[0].workload.func
    assert structural_equal(stored, func) and stored.script() == func.script()
    best = min((r for r in recs if r.ok), key=lambda r: r.median_secs)
    assert structural_equal(db.query_ir_module(func, HOST), replay(func, best.trace))
    db.close()
    if kind == "json":  # JSON lines: one workload, one line per record naming its workload
        import json
        wlines = (tmp_path / "database_workload.json").read_text().splitlines()
        rlines = (tmp_path / "database_tuning_record.json").read_text().splitlines()
        assert [json.loads(x)["key"] for x in wlines] == [wl.key]
        assert [json.loads(x)["workload"] for x in rlines] == [wl.key] * len(recs)


def _json_db_with_records(tmp_path, rng, n=6):
    db = JSONDatabase(tmp_path)
    wl = db.commit_workload(mm_func())
    recs = make_records(wl, rng, n, 0)
    for r in recs:
        db.commit_tuning_record(r)
    return recs, tmp_path / "database_tuning_record.json"


def _reopen_with_warnings(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        db = JSONDatabase(tmp_path)
        got = [r.measure["i"] for r in db.get_all_tuning_records()]
    return db, got, [str(w.message) for w in caught]


def test_json_partial_last_line(tmp_path, rng):
    recs, path = _json_db_with_records(tmp_path, rng)
    data = path.read_bytes()
    cut = rng.randrange(data.rstrip(b"\n").rfind(b"\n") + 2, len(data) - 1)
    path.write_bytes(data[:cut])  # the last record is cut mid-line
    db, got, msgs = _reopen_with_warnings(tmp_path)
    assert got == [r.measure["i"] for r in recs[:-1]]
    assert len(msgs) == 1 and str(path) in msgs[0] and f"line {len(recs)}" in msgs[0]
    db.commit_tuning_record(recs[-1])  # appends on a fresh line, after the partial one
    db, got, msgs = _reopen_with_warnings(tmp_path)
    assert got == [r.measure["i"] for r in recs] and len(msgs) == 1


def test_json_disk_full_keeps_the_records_and_skips_the_partial_line(tmp_path, rng, monkeypatch):
    from looptune.tune.database import json as json_db
    from looptune.tune.error import DatabaseError
    recs, path = _json_db_with_records(tmp_path, rng, n=4)
    before = path.read_bytes()
    db = JSONDatabase(tmp_path)
    real_write = os.write
    calls = []

    def half_then_full(fd, data):  # half a line is written, then the disk is full
        calls.append(data)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        return real_write(fd, data[:len(data) // 2])
    monkeypatch.setattr(json_db.os, "write", half_then_full)
    with pytest.raises(DatabaseError, match="free disk space"):
        db.commit_tuning_record(recs[0])
    monkeypatch.setattr(json_db.os, "write", real_write)
    assert path.read_bytes().startswith(before)  # nothing truncated or rewritten
    db, got, msgs = _reopen_with_warnings(tmp_path)
    assert got == [r.measure["i"] for r in recs] and len(msgs) == 1
    assert f"line {len(recs) + 1}" in msgs[0] and "partial last line" in msgs[0]
    db.commit_tuning_record(recs[0])  # starts on a fresh line; the partial one stays skipped
    db, got, msgs = _reopen_with_warnings(tmp_path)
    assert got == [r.measure["i"] for r in recs + [recs[0]]] and len(msgs) == 1
    assert "corrupt line (or one a writer killed or out of disk space left incomplete)" in msgs[0]


def test_json_garbage_lines(tmp_path, rng):
    recs, path = _json_db_with_records(tmp_path, rng)
    lines = path.read_bytes().split(b"\n")[:-1]
    lines.insert(2, b"\x00\xffgarbage{")
    lines.insert(4, b'{"version": 1, "workload": "0123456789abcdef"}')  # unknown workload
    lines.insert(5, b"")
    lines.insert(6, b'{"version": 1, "workload": "%s", "trace": 3}' % recs[0].workload.key.encode())
    path.write_bytes(b"\n".join(lines) + b"\n")
    (tmp_path / "database_workload.json").open("ab").write(b'{"key": "x", "func": {}}\n')
    db, got, msgs = _reopen_with_warnings(tmp_path)
    assert sorted(got) == sorted(r.measure["i"] for r in recs)
    assert len(msgs) == 4, msgs
    text = "\n".join(msgs)
    for where in ("database_tuning_record.json, line 3", "line 5", "line 7",
                  "database_workload.json, line 2"):
        assert where in text
    assert "unknown workload '0123456789abcdef'" in text
    db.commit_tuning_record(recs[0])
    assert len(_reopen_with_warnings(tmp_path)[1]) == len(recs) + 1


def test_sqlite_sees_other_connections_commits_and_checks_version(tmp_path, rng):
    a = SQLiteDatabase(work_dir=tmp_path)
    b = SQLiteDatabase(tmp_path / "database.sqlite")
    wl = a.commit_workload(mm_func())
    assert b.has_workload(mm_func()) and len(b) == 0
    recs = make_records(wl, rng, 4, 1)
    for i, r in enumerate(recs):
        a.commit_tuning_record(r)
        assert len(b) == i + 1
    best = min((r for r in recs if r.ok), key=lambda r: r.median_secs)
    assert b.get_top_k(b.commit_workload(mm_func()), 1)[0].measure == best.measure
    with pytest.raises(ValueError, match="needs a path or a work_dir"):
        SQLiteDatabase()
    a.close()
    b.close()
    import sqlite3
    with sqlite3.connect(tmp_path / "database.sqlite") as c:
        c.execute("UPDATE meta SET value='7' WHERE name='schema_version'")
    with pytest.raises(ValueError, match="schema version 7"):
        SQLiteDatabase(work_dir=tmp_path)


WRITER = """
import sys, time
sys.path.insert(0, {tests!r})
from looptune.target import Target
from looptune.tune.database import Database, TuningRecord
from looptune import te
from looptune.te.ops import matmul
from looptune.testing import random_schedule
A, B = te.placeholder((13, 9), name="A"), te.placeholder((9, 17), name="B")
db = Database.create({kind!r}, work_dir={path!r})
wl = db.commit_workload(te.create_prim_func([A, B, matmul(A, B)]))
traces = [random_schedule(wl.func, s).trace for s in range(4)]
start = len(db)
print("ready", flush=True)
for i in range(start, 10**6):
    time.sleep(0.001)  # a few hundred commits per run keep reopening quick
    db.commit_tuning_record(TuningRecord(wl, traces[i % 4], (1e-3 + i * 1e-6,), Target(),
                                         measure={{"i": i, "pad": "x" * (i % 5000)}}))
    print("committed", i + 1, flush=True)
"""


def _kill_runs(kind, path, runs, rng, report):
    """Start a committing writer, SIGKILL it after a random delay; repeat on the same db."""
    tests = os.path.dirname(__file__)
    for _ in range(runs):
        p = subprocess.Popen([sys.executable, "-c", WRITER.format(tests=tests, kind=kind,
                                                                   path=str(path))],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        time.sleep(rng.uniform(0.05, 0.5))
        p.send_signal(signal.SIGKILL)
        out, _ = p.communicate()
        # whole lines only: the kill can cut the last one short ("committed" alone)
        done = [int(n) for n in re.findall(r"^committed (\d+)\n", out, re.M)]
        report.append(max(done, default=0))


@pytest.mark.parametrize("kind", ["json", "sqlite"])
def test_sigkill_while_committing_loses_nothing_reported(kind, tmp_path):
    rng = random.Random(os.getpid())
    counts: list = []
    _kill_runs(kind, tmp_path, 5, rng, counts)
    with warnings.catch_warnings(record=True):  # a partial last line is reported, not fatal
        warnings.simplefilter("always")
        db = open_db(kind, tmp_path)
        seen = sorted(r.measure["i"] for r in db.get_all_tuning_records())
    assert counts[-1] > 0 and counts == sorted(counts)
    assert set(range(counts[-1])) <= set(seen), (counts, len(seen))
    assert len(seen) == len(set(seen))  # each writer resumes after what it found
    wl = db.commit_workload(mm_func())
    db.commit_tuning_record(TuningRecord(wl, random_schedule(wl.func, 0).trace, (1.0,), Target(),
                                         measure={"i": -1}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert len(open_db(kind, tmp_path)) == len(seen) + 1


def test_sqlite_reader_while_another_process_writes(tmp_path):
    tests = os.path.dirname(__file__)
    p = subprocess.Popen([sys.executable, "-c", WRITER.format(tests=tests, kind="sqlite",
                                                               path=str(tmp_path))],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        reader = SQLiteDatabase(work_dir=tmp_path)
        seen = []
        for _ in range(20):
            seen.append(len(reader))
            time.sleep(0.02)
        assert seen == sorted(seen) and seen[-1] > seen[0]
        assert reader.get_top_k(reader.commit_workload(mm_func()), 1)[0].measure["i"] == 0
    finally:
        p.kill()
        p.wait()


# --------------------------------------------------------------------- unions, schedule fn
@pytest.mark.parametrize("kind", STORING)
def test_ranking_compares_only_records_measured_alike(kind, tmp_path, rng):
    """A 2-thread time and a 1-thread time are not comparable: a query ranks the records
    measured like the newest one (or like the given evaluator settings)."""
    from looptune.tune.runner import EvaluatorConfig

    db = open_db(kind, tmp_path)
    wl = db.commit_workload(mm_func())
    scheds = changing_schedules(wl.func, 4, rng.randrange(1000))
    runs = [(1e-3, {"num_threads": 2}, 1.0), (4e-3, {"num_threads": 1}, 2.0),
            (9e-3, {"num_threads": 1, "enable_cpu_cache_flush": False}, 3.0),
            (2e-3, {"num_threads": 1, "enable_cpu_cache_flush": True}, 0.5)]
    for sch, (secs, measure, t) in zip(scheds, runs):
        db.commit_tuning_record(TuningRecord(wl, sch.trace, (secs,), HOST, measure=measure,
                                             time=t))
    assert [r.median_secs for r in db.query_tuning_record(wl.func, HOST, k=5)] == [4e-3, 9e-3]
    two = db.query_tuning_record(wl.func, HOST, k=5, evaluator={"num_threads": 2})
    assert [r.median_secs for r in two] == [1e-3]
    flushed = {"num_threads": 1, "enable_cpu_cache_flush": True}
    assert [r.median_secs for r in db.query_tuning_record(wl.func, HOST, k=5,
                                                          evaluator=flushed)] == [2e-3]
    assert db.newest_record(wl.func, HOST).median_secs == 9e-3
    # records without arg_offsets were measured on aligned arrays: not like today's default
    assert db.query_tuning_record(wl.func, HOST, evaluator=EvaluatorConfig(num_threads=1)) == []
    aligned = EvaluatorConfig(num_threads=1, arg_offsets=None, calls_from="c")
    assert db.query_tuning_record(wl.func, HOST, evaluator=EvaluatorConfig(
        num_threads=1, arg_offsets=None)) == []  # nor were they timed from Python
    assert [r.median_secs for r in db.query_tuning_record(wl.func, HOST, k=5,
                                                          evaluator=aligned)] == [4e-3, 9e-3]
    assert len(db.get_top_k(wl, 5)) == 4  # get_top_k itself still sees every record
    db.close()


def test_union_ranks_its_members_with_one_setting(rng):
    a, b = Database.create("memory"), Database.create("memory")
    func = mm_func()
    for db, secs, threads, t in ((a, 1e-3, 2, 1.0), (b, 5e-3, 1, 2.0)):
        wl = db.commit_workload(func)
        sch = changing_schedules(func, 1, rng.randrange(1000))[0]
        db.commit_tuning_record(TuningRecord(wl, sch.trace, (secs,), HOST,
                                             measure={"num_threads": threads}, time=t))
    u = UnionDatabase(a, b)
    assert [r.median_secs for r in u.query_tuning_record(func, HOST, k=5)] == [5e-3]
    assert [r.median_secs for r in u.query_tuning_record(
        func, HOST, k=5, evaluator={"num_threads": 2})] == [1e-3]
    assert u.newest_record(func, HOST).median_secs == 5e-3


def _filled(rng, secs, target=HOST):
    """A memory database with one record per run time in `secs` (real, distinct traces)."""
    db = Database.create("memory")
    wl = db.commit_workload(mm_func())
    for s, sch in zip(secs, changing_schedules(wl.func, len(secs), rng.randrange(1000))):
        db.commit_tuning_record(TuningRecord(wl, sch.trace, (s,), target, measure={"s": s}))
    return db


def test_union_answers_with_the_best_of_all(rng, tmp_path):
    a, b = _filled(rng, [3.0, 2.0]), _filled(rng, [1.5, 4.0])
    c = JSONDatabase(tmp_path)
    u = UnionDatabase(a, b, c)
    func = mm_func()
    assert u.has_workload(func) and not u.has_workload(mm_func(5, 5, 5))
    assert len(u) == 4 and len(u.get_all_tuning_records()) == 4
    assert [r.measure["s"] for r in u.query_tuning_record(func, HOST, k=3)] == [1.5, 2.0, 3.0]
    best = b.get_top_k(b.commit_workload(func), 1)[0]
    assert structural_equal(u.query_ir_module(func, HOST), replay(func, best.trace))
    assert u.query_schedule(func, OTHER) is None
    with pytest.raises(TypeError, match="read-only"):
        u.commit_tuning_record(best)
    with pytest.raises(TypeError, match="read-only"):
        u.commit_workload(func)


def test_ordered_union_asks_in_order(rng):
    a, b = _filled(rng, [3.0, 2.0]), _filled(rng, [1.0])
    empty = Database.create("memory")
    func = mm_func()
    o = OrderedUnionDatabase(empty, a, b)
    assert [r.measure["s"] for r in o.query_tuning_record(func, HOST)] == [2.0]
    best_a = a.get_top_k(a.commit_workload(func), 1)[0]
    assert structural_equal(o.query_ir_module(func, HOST), replay(func, best_a.trace))
    # a hand-written fallback answers what no database has
    def parallel_outer(sch):
        sch.parallel(sch.get_loops(sch.get_block("matmul"))[0])
        return True

    fallback = ScheduleFnDatabase(parallel_outer)
    o2 = OrderedUnionDatabase(a, fallback)
    other = mm_func(6, 7, 8)
    got = o2.query_schedule(other, HOST)
    assert [i.kind.name for i in got.trace.insts] == ["GetBlock", "GetLoops", "Parallel"]
    assert structural_equal(o2.query_ir_module(func, HOST), replay(func, best_a.trace))
    with pytest.raises(TypeError, match="read-only"):
        o2.commit_workload(func)


def test_schedule_fn_database(rng):
    def fn(sch):
        if sch.func.name != "matmul":
            return False
        i, j, k = sch.get_loops(sch.get_block("matmul"))
        sch.split(j, [None, 4])
        return True

    db = ScheduleFnDatabase(fn)
    func = mm_func()
    sch = db.query_schedule(func, HOST)
    want = Schedule(func)
    fn(want)
    assert structural_equal(sch.func, want.func) and not structural_equal(sch.func, func)
    assert db.query_schedule(mm_func(with_relu=True), HOST) is None
    wl = db.commit_workload(func)
    db.commit_tuning_record(TuningRecord(wl, sch.trace, (1.0,), HOST))
    assert len(db) == 0 and db.get_all_tuning_records() == [] and not db.has_workload(func)
    with pytest.raises(TypeError, match="must return True"):
        ScheduleFnDatabase(lambda sch: None).query_schedule(func, HOST)


@pytest.mark.cc
def test_compile_tir_builds_with_a_schedule_function():
    import numpy as np
    from looptune.tune import compile_tir
    rng = np.random.default_rng(3)

    def fn(sch):
        i, j, k = sch.get_loops(sch.get_block("matmul"))
        sch.split(j, [None, 4])
        return True

    func = mm_func(8, 12, 5)
    mod = compile_tir(ScheduleFnDatabase(fn), func, "cpu")
    assert mod.record is None and [i.kind.name for i in mod.schedule.trace.insts][-1] == "Split"
    a, b = rng.uniform(-1, 1, (8, 5)).astype("float32"), rng.uniform(-1, 1, (5, 12)).astype(
        "float32")
    out = np.full((8, 12), np.nan, "float32")
    mod(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="no tuning record"):
        compile_tir(ScheduleFnDatabase(lambda sch: False), func, "cpu")


# --------------------------------------------------------------------- anchor block
def test_anchor_block_and_key():
    plain, fused = mm_func(), mm_func(with_relu=True)
    assert anchor_block(plain).name == "matmul" and anchor_block(fused).name == "matmul"
    assert anchor_key(plain) == anchor_key(fused) == anchor_key(mm_func(names=("X", "Y")))
    assert structural_hash(plain) != structural_hash(fused)
    assert len({anchor_key(plain), anchor_key(mm_func(13, 17, 10)), anchor_key(mm_func(17, 13, 9)),
                anchor_key(small_workload("batch_matmul")[0])}) == 4
    assert anchor_block(small_workload("relu")[0]).name == "relu"  # no reduction: largest block
    conv = small_workload("conv2d")[0]  # the padding block is spatial; the conv reduces
    assert anchor_block(conv).is_reduction and anchor_block(conv).name == "conv2d_nchw"
    sm = small_workload("softmax")[0]
    assert anchor_block(sm).name == "softmax_max"  # equal spaces: the first reduction


@pytest.mark.parametrize("kind", STORING)
def test_anchor_block_reuses_plain_records_for_a_fused_variant(kind, tmp_path, rng):
    plain, fused = mm_func(), mm_func(with_relu=True)
    db = open_db(kind, tmp_path, module_equality="anchor-block")
    wl = db.commit_workload(plain)
    recs = make_records(wl, rng, 4, 1)
    for r in recs:
        db.commit_tuning_record(r)
    assert db.has_workload(fused) and len(db.query_tuning_record(fused, HOST, k=10)) == 4
    best = min((r for r in recs if r.ok), key=lambda r: r.median_secs)
    got = db.query_ir_module(fused, HOST)
    plain_done = replay(plain, best.trace)
    mm_nest, relu_nest = got.root.body.stmts
    assert structural_equal(mm_nest, plain_done.root.body)  # the matmul part is scheduled
    assert structural_equal(relu_nest, fused.root.body.stmts[1])  # the relu block untouched
    assert not structural_equal(got, fused)
    if kind != "memory":  # reopened, the keys still match
        assert len(open_db(kind, tmp_path, module_equality="anchor-block")
                   .query_tuning_record(fused, HOST, k=10)) == 4
    strict = open_db(kind, tmp_path) if kind != "memory" else Database.create("memory")
    if kind == "memory":
        for r in recs:
            strict.commit_tuning_record(r)
    assert strict.has_workload(plain) and not strict.has_workload(fused)
    assert strict.query_schedule(fused, HOST) is None
    assert structural_equal(strict.query_ir_module(plain, HOST), plain_done)
