"""Templates on the one tuning engine: a template task is a TuneContext whose design space is
its knobs as sampling instructions (TemplateSpace), searched by the classic tuners as
registered search strategies; candidates are made by running the template, so knob-dependent
control flow is honoured (pure Python). The task scheduler measures them with tune's builder
and runner beside tune_tir tasks, resumes from the database, and records configs a primitive
refuses as schedule errors (C compiler)."""
from __future__ import annotations

import math

import pytest

import looptune as lt
from looptune import autotvm, te
from looptune.template import MeasureResult, TemplateError, TemplateSpace, config_of_trace
from looptune.template.search_strategy import TemplateSearch
from looptune.tune import (EvaluatorConfig, MemoryDatabase, SearchStrategy, TuneContext,
                           tune_tasks)

FAST = EvaluatorConfig(number=1, repeat=1, min_repeat_ms=0, num_threads=1)


@autotvm.template("test_engine_pad_conv")
def pad_conv(n=1, c=4, hw=8, k=8):
    """A small conv2d whose padding stage is inlined, or computed at the root or per output
    channel tile, as knob "pad_at" says: different primitives per config."""
    X = te.placeholder((n, c, hw, hw), name="X")
    W = te.placeholder((k, c, 3, 3), name="W")
    out = te.ops.conv2d_nchw(X, W, padding=1)
    sch = lt.Schedule(te.create_prim_func([X, W, out]))
    conv = sch.get_block("conv2d_nchw")
    padding = sch.get_producers(conv)[0]
    loops = sch.get_loops(conv)
    cfg = autotvm.get_config()
    cfg.define_split("tile_k", loops[1], num_outputs=2, max_factor=4)
    ko, _ = cfg["tile_k"].apply(sch, loops[1])
    cfg.define_knob("pad_at", ["inline", "root", "ko"])
    where = cfg["pad_at"].val
    if where == "inline":
        sch.compute_inline(padding)
    elif where == "ko":
        sch.compute_at(padding, ko)
    return sch, [X, W, out]


def one_timing():
    """Measure each config once, quickly (the tests check what is recorded, not speed)."""
    return autotvm.measure_option(
        builder="local", runner=autotvm.LocalRunner(number=1, repeat=1, min_repeat_ms=0))


@autotvm.template("test_engine_refusing")
def refusing(n=16):
    """Half of its configs ask for something illegal (inlining a reduction)."""
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    C = te.ops.matmul(A, B)
    sch = lt.Schedule(te.create_prim_func([A, B, C]))
    block = sch.get_block("matmul")
    i, _, _ = sch.get_loops(block)
    cfg = autotvm.get_config()
    cfg.define_split("tile_i", i, num_outputs=2, max_factor=2)
    cfg.define_knob("inline_it", [False, True])
    cfg["tile_i"].apply(sch, i)
    if cfg["inline_it"].val:
        sch.compute_inline(block)          # a reduction: ScheduleError
    return sch, [A, B, C]


def test_the_classic_tuners_are_registered_search_strategies():
    names = ["template-gridsearch", "template-random", "template-ga", "template-sa",
             "template-hill-climb", "template-xgb"]
    assert sorted(TemplateSearch.names()) == sorted(names)
    for name in names:
        assert isinstance(SearchStrategy.create(name), TemplateSearch)
    task = autotvm.task.create("test_engine_pad_conv", ())
    tuner = autotvm.tuner.XGBTuner(task, seed=0, plan_size=8)
    assert tuner.strategy.registered_name == "template-xgb"
    assert tuner.context.search_strategy is tuner.strategy
    assert isinstance(tuner.context.space_generator, TemplateSpace)


def test_a_template_task_is_a_tune_context_with_knobs_as_its_design_space():
    task = autotvm.task.create("test_engine_pad_conv", ())
    ctx = task.tune_context("template-random", seed=0)
    assert isinstance(ctx, TuneContext) and ctx.func is task.func and ctx.flops == task.flop
    (space,) = ctx.generate_design_space()
    assert [i.kind.name for i in space.trace.insts] == ["SampleKnob", "SampleKnob"]
    assert [i.attrs[0] for i in space.trace.insts] == ["tile_k", "pad_at"]
    assert config_of_trace(task.config_space, space.trace) == task.fallback_config()
    # a point of the space (other decisions) is a config of the task
    pad_at = space.trace.insts[1]
    other = space.trace.with_decision(pad_at, 2)
    assert ctx.space_generator.config_of(other).values == {"tile_k": [8, 1], "pad_at": "ko"}


def test_candidates_run_the_template_so_knob_dependent_primitives_follow_the_knobs():
    task = autotvm.task.create("test_engine_pad_conv", ())
    ctx = task.tune_context("template-gridsearch", seed=0)
    strat = ctx.search_strategy
    strat.pre_tuning(max_trials=len(task.config_space), num_trials_per_iter=100,
                     design_spaces=ctx.generate_design_space(), database=None, seen=set())
    cands = strat.generate_measure_candidates()
    assert len(cands) == len(task.config_space) == 9
    for cand in cands:
        kinds = [i.kind.name for i in cand.sch.trace.insts]
        where = cand.config["pad_at"].val
        assert ("ComputeInline" in kinds) == (where == "inline")
        assert ("ComputeAt" in kinds) == (where == "ko")
        assert config_of_trace(task.config_space, cand.trace) == cand.config
    assert len({c.sch_hash for c in cands}) == 9
    assert strat.generate_measure_candidates() is None          # the space is exhausted


def test_a_template_space_takes_template_strategies_only():
    task = autotvm.task.create("test_engine_pad_conv", ())
    with pytest.raises(TemplateError, match="searched by the template strategies"):
        TuneContext(task.func, "cpu", TemplateSpace(task), "evolutionary")
    with pytest.raises(TemplateError, match="searches a template's configs"):
        TuneContext(task.func, "cpu", "post-order-apply", "template-xgb")


def test_refused_configs_are_failures_the_tuner_does_not_repeat():
    task = autotvm.task.create("test_engine_refusing", ())
    tuner = autotvm.tuner.GridSearchTuner(task)
    seen = []

    def measure(inputs):
        seen.extend(inputs)
        return [MeasureResult(error_class="schedule_error", error_msg=i.refused) if i.refused
                else MeasureResult(costs=(1e-3,)) for i in inputs]
    tuner.tune(len(task.config_space), measure)
    refused = [i for i in seen if i.refused]
    assert len(refused) == len(task.config_space) // 2
    assert all(i.config["inline_it"].val for i in refused)
    assert "does not apply" in refused[0].refused
    assert [k.kind.name for k in refused[0].trace.insts] == ["SampleKnob", "SampleKnob"]
    assert sum(math.isinf(s) for _, s in tuner.history) == len(refused)


# ---------------------------------------------------------------------------- with a compiler
@pytest.mark.cc
def test_template_tasks_tune_beside_tir_tasks_and_resume():
    from looptune.tir.structural import structural_hash
    task = autotvm.task.create("test_engine_pad_conv", ())
    A = te.placeholder((32, 32), name="A")
    tir_func = te.create_prim_func([A, te.compute((32, 32), lambda i, j: A[i, j] * 2.0, name="B")])
    db = MemoryDatabase()

    def contexts():
        return [task.tune_context("template-ga", seed=0, pop_size=4),
                TuneContext(tir_func, "cpu", "post-order-apply", "replay-trace", seed=0)]
    tune_tasks(contexts(), database=db, max_trials_global=6, num_trials_per_iter=3,
               task_scheduler="round-robin", evaluator=FAST, progress=False)
    mine = db.records_of(task.workload, "cpu")
    theirs = db.records_of(structural_hash(tir_func), "cpu")
    assert len(mine) == 3 and len(theirs) == 3 and all(r.ok for r in mine + theirs)
    assert {r.measure["run"]["strategy"] for r in mine} == {"template-ga"}
    configs = [config_of_trace(task.config_space, r.trace).index for r in mine]
    assert len(set(configs)) == 3

    # resumed with the same database: the template's earlier configs are not measured again
    tune_tasks(contexts(), database=db, max_trials_global=12, num_trials_per_iter=3,
               task_scheduler="round-robin", evaluator=FAST, progress=False)
    mine = db.records_of(task.workload, "cpu")
    configs = [config_of_trace(task.config_space, r.trace).index for r in mine]
    assert len(db) == 12 and len(mine) > 3 and len(set(configs)) == len(mine)


@pytest.mark.cc
def test_the_engine_records_refused_configs_as_schedule_errors(tmp_path):
    from looptune.template import log_to_file
    from looptune.tune import JSONDatabase
    task = autotvm.task.create("test_engine_refusing", ())
    option = one_timing()
    tuner = autotvm.tuner.GridSearchTuner(task)
    batches = []
    tuner.tune(len(task.config_space), option,
               callbacks=[log_to_file(tmp_path / "log"),
                          lambda t, inputs, results: batches.append(results)])
    recs = JSONDatabase(tmp_path / "log").get_all_tuning_records()
    assert len(recs) == len(tuner.database) == len(task.config_space)
    bad = [r for r in recs if not r.ok]
    assert len(bad) == len(task.config_space) // 2
    assert {r.error_class for r in bad} == {"schedule_error"} and not any(r.sch_hash for r in bad)
    assert all(config_of_trace(task.config_space, r.trace)["inline_it"].val for r in bad)
    results = [r for b in batches for r in b]
    assert all(r.record is not None for r in results)       # callbacks see the engine's records
    assert tuner.best_measure_pair[1].record is not None and tuner.best_config is not None
    assert not tuner.best_config["inline_it"].val


@pytest.mark.cc
def test_a_simulated_runner_answers_a_tuner_from_a_measured_sweep(tmp_path):
    from looptune.template import log_to_file
    from looptune.tune import JSONDatabase, SimulatedRunner
    task = autotvm.task.create("test_engine_pad_conv", ())
    option = one_timing()
    sweep = autotvm.tuner.GridSearchTuner(task)
    sweep.tune(len(task.config_space), option, callbacks=[log_to_file(tmp_path / "sweep")])
    table = dict(sweep.history)
    assert len(table) == len(task.config_space)
    tuner = autotvm.tuner.XGBTuner(task, seed=0, plan_size=4, min_train=2, retrain_every=2)
    tuner.tune(6, autotvm.measure_option(runner=SimulatedRunner(JSONDatabase(tmp_path / "sweep"))))
    assert len(tuner.history) == 6 and all(secs == table[i] for i, secs in tuner.history)
    assert len(tuner.database) == 6 and tuner.train_ct >= 1
