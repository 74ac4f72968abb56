"""Records apply to every workload that computes the same thing in the same loops, whatever
its tensors and blocks are called: tune.replay maps the record's block names onto the
function's through the structural correspondence of the two (pure Python), and a template
or tune_tir record tuned under one set of names serves compile_tir and compile_model under
another (C compiler)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import looptune as lt
from looptune import autotvm, te
from looptune.tune import DatabaseWarning, EvaluatorConfig, MemoryDatabase, TuningRecord


def mm_relu(names=("A", "B", "mm", "act"), m=32, n=48, k=40):
    """relu(A @ B) as two blocks, with the tensors (and so the blocks) named `names`."""
    a, b, mm, act = names
    A = te.placeholder((m, k), name=a)
    B = te.placeholder((k, n), name=b)
    out = te.ops.relu(te.ops.matmul(A, B, name=mm), name=act)
    return te.create_prim_func([A, B, out])


def mm_relu_ref(a, b):
    return np.maximum(a @ b, 0)


def mm_relu_template(m, n, k, names=("A", "B", "mm", "act")):
    """A tiled matmul + relu with knobs, its tensors and blocks named `names`."""
    a, b, mm, act = names
    A = te.placeholder((m, k), name=a)
    B = te.placeholder((k, n), name=b)
    out = te.ops.relu(te.ops.matmul(A, B, name=mm), name=act)
    sch = lt.Schedule(te.create_prim_func([A, B, out]))
    block = sch.get_block(mm)
    i, j, kk = sch.get_loops(block)
    cfg = autotvm.get_config()
    cfg.define_split("tile_i", i, num_outputs=2, max_factor=8)
    cfg.define_split("tile_j", j, num_outputs=2, max_factor=16)
    io, ii = cfg["tile_i"].apply(sch, i)
    jo, ji = cfg["tile_j"].apply(sch, j)
    sch.reorder(io, jo, kk, ii, ji)
    sch.reverse_compute_at(sch.get_block(act), jo)   # the trace names both blocks
    return sch, [A, B, out]


@autotvm.template("test_renamed_mm_relu")
def renamed_mm_relu(m, n, k):
    return mm_relu_template(m, n, k)


def schedule_with_derived_names(func, mm="mm"):
    """A schedule that looks up blocks by name, including one that cache_write made (named
    after the buffer, so it differs between workloads of other names too)."""
    sch = lt.Schedule(func, seed=0)
    block = sch.get_block(mm)
    sch.cache_write(block, 0, "local")
    copy = sch.get_block(f"{mm}_local")            # the copy-back block, found by its new name
    _, j = sch.get_loops(copy)
    _, ji = sch.split(j, [None, 8])
    sch.vectorize(ji)
    return sch


# ---------------------------------------------------------------------------- pure Python
def test_replay_maps_block_names_through_the_structure():
    from looptune.tir.structural import structural_equal, structural_hash
    from looptune.tune.replay import replay
    mine, other = mm_relu(), mm_relu(("X", "Y", "prod", "out"))
    assert structural_hash(mine) != structural_hash(other)          # block names count there
    assert structural_equal(mine, other, block_names=False)
    sch = schedule_with_derived_names(mine)
    done = replay(sch.trace, other, workload_func=mine)
    assert structural_equal(done.func, sch.func, block_names=False)
    assert "prod_local" in done.state.index.blocks and "mm" not in done.state.index.blocks
    # the replayed trace names other's blocks: it replays on other directly
    again = lt.Schedule(other, seed=0)
    done.trace.apply_to_schedule(again)
    assert structural_hash(again.func) == structural_hash(done.func)
    # a plain replay of the record's trace cannot find its blocks
    with pytest.raises(lt.ScheduleError, match="no block named 'mm'"):
        sch.trace.apply_to_schedule(lt.Schedule(other, seed=0))


def test_replay_refuses_another_computation():
    from looptune.tune.replay import replay
    sch = schedule_with_derived_names(mm_relu())
    with pytest.raises(lt.ScheduleError, match="does not compute what"):
        replay(sch.trace, mm_relu(("X", "Y", "prod", "out"), k=24), workload_func=mm_relu())
    with pytest.raises(lt.ScheduleError, match="does not compute what"):
        replay(sch.trace, mm_relu(k=24), workload_func=mm_relu())   # same names, other shape


def test_database_serves_records_to_workloads_with_other_block_names():
    from looptune.tir.structural import structural_hash
    mine, other = mm_relu(), mm_relu(("X", "Y", "prod", "out"))
    sch = schedule_with_derived_names(mine)
    db = MemoryDatabase()
    wl = db.commit_workload(mine)
    db.commit_tuning_record(TuningRecord(wl, sch.trace, (1e-3,), lt.Target.create("cpu"),
                                         sch_hash=structural_hash(sch.func)))
    assert db.has_workload(other) and db.key_of(other) != wl.key
    assert [r.workload.key for r in db.query_tuning_record(other, "cpu")] == [wl.key]
    assert not db.has_workload(mm_relu(k=24))
    got = db.query_schedule(other, "cpu")
    assert got is not None and "prod_local" in got.state.index.blocks


def test_apply_history_best_serves_a_template_whose_blocks_are_named_otherwise(tmp_path):
    from looptune.template import MeasureResult, TemplateWarning, config_of_trace, log_to_file

    @autotvm.template("test_renamed_mm_relu_other_names")
    def other_names(m, n, k):  # renamed_mm_relu with other tensor and block names
        return mm_relu_template(m, n, k, names=("X", "Y", "prod", "out"))

    task = autotvm.task.create("test_renamed_mm_relu", args=(32, 48, 40))
    tuner = autotvm.tuner.RandomTuner(task, seed=0)
    tuner.tune(8, lambda inputs: [MeasureResult(costs=(1e-3 * (1 + i.config.index),))
                                  for i in inputs], callbacks=[log_to_file(tmp_path / "log")])
    with warnings.catch_warnings():
        warnings.simplefilter("error", TemplateWarning)  # no fallback, no "no longer gives"
        with autotvm.apply_history_best(tmp_path / "log"):
            sch, _ = other_names(32, 48, 40)
    other = autotvm.task.create("test_renamed_mm_relu_other_names", args=(32, 48, 40))
    assert other.workload.key != task.workload.key
    assert config_of_trace(other.config_space, sch.trace).index == tuner.best_config.index


# ---------------------------------------------------------------------------- with a compiler
@pytest.mark.cc
def test_a_template_record_serves_workloads_with_other_names(tmp_path):
    from looptune.graph import GraphBuilder, compile_model
    from looptune.template import config_of_trace, log_to_file
    from looptune.tune import JSONDatabase, compile_tir
    task = autotvm.task.create("test_renamed_mm_relu", args=(32, 48, 40))
    option = autotvm.measure_option(
        builder="local", runner=autotvm.LocalRunner(number=1, repeat=2, min_repeat_ms=0))
    tuner = autotvm.tuner.RandomTuner(task, seed=0)
    tuner.tune(4, option, callbacks=[log_to_file(tmp_path / "log")])
    db = JSONDatabase(tmp_path / "log")
    assert len(db) == 4 and all(r.ok for r in db.get_all_tuning_records())

    rng = np.random.default_rng(1)
    a = rng.standard_normal((32, 40), dtype=np.float32)
    b = rng.standard_normal((40, 48), dtype=np.float32)
    func = mm_relu(("X", "Y", "prod", "out"))   # other tensor and block names
    with warnings.catch_warnings():
        warnings.simplefilter("error", DatabaseWarning)   # no record skipped as unreplayable
        mod = compile_tir(db, func, "cpu")
    assert config_of_trace(task.config_space, mod.record.trace) == tuner.best_config
    out = np.zeros((32, 48), np.float32)
    mod(a, b, out)
    np.testing.assert_allclose(out, mm_relu_ref(a, b), rtol=1e-4, atol=1e-4)

    # a model's fused matmul + relu is that workload too (blocks "matmul" and "relu")
    g = GraphBuilder("mm_relu")
    graph = g.finish(g.op("relu", g.op("matmul", g.input("a", (32, 40)), g.input("b", (40, 48)))))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DatabaseWarning)
        compiled = compile_model(graph, db, "cpu")
    assert [t["tuned"] for t in compiled.desc["tasks"]] == [True]
    np.testing.assert_allclose(compiled(a, b), mm_relu_ref(a, b), rtol=1e-4, atol=1e-4)


@pytest.mark.cc
def test_a_tune_tir_record_serves_a_workload_with_other_names():
    from looptune.tune import compile_tir, tune_tir
    db = tune_tir(mm_relu(), "cpu", database=MemoryDatabase(), max_trials_global=3,
                  num_trials_per_iter=3, strategy="replay-trace", seed=0, progress=False,
                  evaluator=EvaluatorConfig(number=1, repeat=1, min_repeat_ms=0, num_threads=1))
    assert any(r.ok for r in db.get_all_tuning_records())
    func = mm_relu(("X", "Y", "prod", "out"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DatabaseWarning)
        mod = compile_tir(db, func, "cpu", num_threads=1)
    assert mod.record.workload.key == db.key_of(mm_relu()) != db.key_of(func)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((32, 40), dtype=np.float32)
    b = rng.standard_normal((40, 48), dtype=np.float32)
    out = np.zeros((32, 48), np.float32)
    mod(a, b, out)
    np.testing.assert_allclose(out, mm_relu_ref(a, b), rtol=1e-4, atol=1e-4)
