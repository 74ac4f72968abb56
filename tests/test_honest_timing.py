"""What the tuner reports is what the user gets: compile_tir runs a kernel with the settings
its record was measured with, and a tuned kernel called with ordinary numpy arrays takes the
time its record shows."""
from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

import looptune as lt
from looptune import te
from looptune.target import Target
from looptune.tune import compile_tir
from looptune.tune.database import Database, TuningRecord

pytestmark = pytest.mark.cc


def parallel_add(n=4096):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    func = te.create_prim_func([A, B])
    sch = lt.Schedule(func)
    o, _ = sch.split(sch.get_loops(sch.get_block("B"))[0], [8, None])
    sch.parallel(o)
    return func, sch


def db_with(func, sch, *runs):
    """A memory database with one record of `sch` per (seconds, measure, time)."""
    db = Database.create("memory")
    wl = db.commit_workload(func)
    for secs, measure, t in runs:
        db.commit_tuning_record(TuningRecord(wl, sch.trace, (secs,), Target.create("cpu"),
                                             measure=measure, time=t))
    return db


def test_compile_tir_uses_the_records_thread_count():
    func, sch = parallel_add()
    host = Target.create("cpu")
    assert compile_tir(db_with(func, sch, (1e-3, {"num_threads": 1}, 1.0)),
                       func).num_threads == 1
    assert compile_tir(db_with(func, sch, (1e-3, {}, 1.0)), func).num_threads == host.cores
    assert compile_tir(db_with(func, sch, (1e-3, {"num_threads": 1}, 1.0)), func,
                       num_threads=2).num_threads == 2


def test_compile_tir_ranks_the_latest_settings_only():
    """A faster record measured with 2 threads does not beat the 1-thread run that came
    after it; asked for 2-thread settings, compile_tir takes that one (and its threads)."""
    func, sch = parallel_add()
    db = db_with(func, sch, (1e-4, {"num_threads": 2}, 1.0), (5e-4, {"num_threads": 1}, 2.0))
    mod = compile_tir(db, func)
    assert mod.record.median_secs == 5e-4 and mod.num_threads == 1
    mod = compile_tir(db, func, evaluator={"num_threads": 2})
    assert mod.record.median_secs == 1e-4 and mod.num_threads == 2
