"""SimulatedRunner: answers from a table of stored measurements, never invents one; a
missing schedule is an error or is measured for real; tuning over a table takes seconds."""
from __future__ import annotations

import time

import pytest

from looptune import te
from looptune.schedule import Schedule
from looptune.target import Target
from looptune.te.ops import workload
from looptune.tune import (Builder, EvaluatorConfig, MemoryDatabase, Runner, SimulatedRunner,
                           SimulationError, TuneError, TuningRecord, simulate, tune_tir)

from test_tune import FakeBuilder, FakeRunner

TARGET = Target.create("cpu")
SETTINGS = EvaluatorConfig(num_threads=1, repeat=3, min_repeat_ms=2.0)


def tiny():
    """relu on 1x4x4x8: a design space of 16 schedules, swept whole in a moment."""
    return te.create_prim_func(workload("relu", N=1, C=4, H=4, W=8)[0])


def table_db(func, rows, *, evaluator=SETTINGS, target=TARGET):
    """A database holding one record per (sch_hash, seconds or error class)."""
    db = MemoryDatabase()
    wl = db.commit_workload(func)
    for i, (h, s) in enumerate(rows):
        failed = isinstance(s, str)
        db.commit_tuning_record(TuningRecord(
            wl, Schedule(func).trace, None if failed else (s, s * 1.1, s * 0.9), target,
            measure={**evaluator.to_json(), "compiler": "cc 12", "source_hash": f"src{i}",
                     "aborted_early": False, "run": {"id": "sweep"}},
            error_class=s if failed else None, error_msg="it crashed" if failed else None,
            time=100.0 + i, sch_hash=h))
    return db


class NoBuilder(Builder):
    def build(self, inputs):
        raise AssertionError("a simulated run over a complete table builds nothing")


def sweep(func, trials):
    """A table of the design space: replay-trace with fake (deterministic) timings."""
    db = MemoryDatabase()
    tune_tir(func, TARGET, database=db, max_trials_global=trials, num_trials_per_iter=32, seed=0,
             strategy="replay-trace", builder=FakeBuilder(), runner=FakeRunner(),
             evaluator=SETTINGS, check_correctness=False, progress=False)
    return db


# ---------------------------------------------------------------------------- the table
def test_stored_records_answer_as_themselves():
    f = tiny()
    db = table_db(f, [("a", 2e-3), ("b", 1e-3), ("c", "run_error"), ("a", 3e-3)])
    runner = Runner.create("simulated", database=db)
    assert isinstance(runner, SimulatedRunner) and len(runner) == 3
    key = db.key_of(f)
    a, b, c = (runner.recall(key, h, TARGET) for h in "abc")
    assert a.run_secs == (3e-3, 3e-3 * 1.1, 3e-3 * 0.9)        # the newer record of "a"
    assert b.run_secs == (1e-3, 1e-3 * 1.1, 1e-3 * 0.9) and b.ok
    assert not c.ok and c.error_class == "run_error" and c.error_msg == "it crashed"
    assert b.measure["simulated"] is True and b.measure["source_hash"] == "src1"
    assert "run" not in b.measure                      # the tuner adds its own run
    assert runner.evaluator == SETTINGS and runner.target.key() == TARGET.key()
    assert runner.hits == 3


def test_a_missing_schedule_is_a_clear_error():
    f = tiny()
    runner = SimulatedRunner(table_db(f, [("a", 1e-3)]))
    with pytest.raises(SimulationError, match="not in the simulation table.*on_missing='measure'"):
        runner.recall(MemoryDatabase().key_of(f), "zzz", TARGET)
    with pytest.raises(SimulationError, match="no record of workload"):
        runner.recall("another-workload", "a", TARGET)
    other = Target.from_json({**TARGET.to_json(), "cores": TARGET.cores + 7})
    with pytest.raises(SimulationError, match="the table was measured on"):
        runner.recall(MemoryDatabase().key_of(f), "a", other)
    assert issubclass(SimulationError, TuneError)
    with pytest.raises(TuneError, match="on_missing must be one of"):
        SimulatedRunner(table_db(f, [("a", 1e-3)]), on_missing="guess")
    with pytest.raises(TuneError, match="holds no records"):
        SimulatedRunner(MemoryDatabase())


def test_the_table_holds_one_target_and_one_set_of_settings():
    f = tiny()
    db = table_db(f, [("a", 1e-3), ("b", 2e-3)])
    two = EvaluatorConfig(num_threads=2)
    wl = db.commit_workload(f)
    db.commit_tuning_record(TuningRecord(wl, Schedule(f).trace, (5e-4,), TARGET,
                                         measure=two.to_json(), time=50.0, sch_hash="c"))
    runner = SimulatedRunner(db)                         # the newest record's settings
    assert len(runner) == 2 and runner.evaluator == SETTINGS
    assert len(SimulatedRunner(db, evaluator=two)) == 1
    with pytest.raises(TuneError, match="leave evaluator= unset"):
        tune_tir(f, TARGET, database=MemoryDatabase(), max_trials_global=2, runner=runner,
                 evaluator=two, strategy="replay-trace", progress=False)


def test_a_work_dir_is_a_table(tmp_path):
    from looptune.tune import SQLiteDatabase
    f = tiny()
    db = SQLiteDatabase(work_dir=str(tmp_path))
    for rec in table_db(f, [("a", 1e-3)]).get_all_tuning_records():
        db.commit_tuning_record(rec)
    db.close()
    assert len(SimulatedRunner(str(tmp_path))) == 1
    with pytest.raises(TuneError, match="no tuning database"):
        SimulatedRunner(str(tmp_path / "elsewhere"))


# ---------------------------------------------------------------------------- tuning over it
def test_tuning_over_a_table_takes_seconds_and_reports_only_stored_times():
    f = tiny()
    table = sweep(f, 64)
    stored = {r.sch_hash: r.run_secs for r in table.get_all_tuning_records()}
    assert len(stored) == 16                                # the whole design space
    runner = SimulatedRunner(table)
    t0 = time.perf_counter()
    runs = simulate(f, runner, strategies=["replay-trace", {"cost_model": "random"}],
                    seeds=range(20), max_trials=8, num_trials_per_iter=4, builder=NoBuilder())
    elapsed = time.perf_counter() - t0
    recs = runs.get_all_tuning_records()
    assert len(recs) == 2 * 20 * 8
    assert all(r.run_secs == stored[r.sch_hash] for r in recs)   # nothing invented
    assert all(r.measure["simulated"] and r.measure["num_threads"] == 1 for r in recs)
    strategies = {(r.measure["run"]["strategy"], r.measure["run"]["seed"]) for r in recs}
    assert len(strategies) == 40 and {s for s, _ in strategies} == {"replay-trace",
                                                                    "evolutionary/random"}
    assert len({r.measure["run"]["id"] for r in recs}) == 40
    assert runner.hits == len(recs) and runner.misses == 0
    assert elapsed < 60, f"40 simulated runs took {elapsed:.1f} s"

    from looptune.report import collect
    (task,) = collect(runs)
    assert len(task.runs) == 40 and set(task.strategies()) == {"replay-trace",
                                                               "evolutionary/random"}


def test_evolutionary_search_with_its_cost_model_over_a_table():
    f = tiny()
    runner = SimulatedRunner(sweep(f, 64))
    t0 = time.perf_counter()
    db = tune_tir(f, runner.target, database=MemoryDatabase(), max_trials_global=12,
                  num_trials_per_iter=4, seed=0, runner=runner, builder=NoBuilder(),
                  progress=False)
    assert len(db) == 12 and time.perf_counter() - t0 < 30
    assert all(r.measure["simulated"] for r in db.get_all_tuning_records())


def test_a_partial_table_stops_the_run_with_on_missing_error():
    f = tiny()
    runner = SimulatedRunner(sweep(f, 3))
    with pytest.raises(SimulationError, match="not in the simulation table"):
        tune_tir(f, runner.target, database=MemoryDatabase(), max_trials_global=16, seed=1,
                 strategy="replay-trace", runner=runner, builder=NoBuilder(), progress=False)


def test_on_missing_measure_builds_and_runs_what_the_table_lacks():
    f = tiny()
    runner = SimulatedRunner(sweep(f, 3), on_missing="measure", runner=FakeRunner())
    db = tune_tir(f, runner.target, database=MemoryDatabase(), max_trials_global=16, seed=1,
                  strategy="replay-trace", runner=runner, builder=FakeBuilder(),
                  check_correctness=False, progress=False)
    recs = db.get_all_tuning_records()
    simulated = [r for r in recs if r.measure.get("simulated")]
    assert len(simulated) == runner.hits == 3 and runner.misses == 13
    assert len(runner) == 16  # what was measured joins the table for later runs
    assert all(r.measure["num_threads"] == 1 for r in recs)  # with the table's settings


@pytest.mark.cc
def test_on_missing_measure_measures_for_real(tmp_path):
    f = tiny()
    tune_tir(f, TARGET, str(tmp_path / "table"), max_trials_global=3, num_trials_per_iter=3,
             seed=0, strategy="replay-trace", evaluator=SETTINGS, progress=False)
    runner = SimulatedRunner(str(tmp_path / "table"), on_missing="measure")
    db = tune_tir(f, runner.target, database=MemoryDatabase(), max_trials_global=6,
                  num_trials_per_iter=6, seed=0, strategy="replay-trace", runner=runner,
                  progress=False)
    recs = db.get_all_tuning_records()
    real = [r for r in recs if not r.measure.get("simulated")]
    assert len(recs) == 6 and runner.hits == 3 and len(real) == 3 == runner.misses
    assert all(r.ok and r.measure["num_threads"] == 1 and r.measure["source_hash"] for r in real)
