"""Compiled models: one native call per inference, default schedules for untuned tasks,
tuned records where they exist, a static memory plan, export and load."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from looptune.graph import (GraphBuilder, ModelError, compile_model, evaluate, extract_tasks,
                            load, model_evaluator, tune_model, untuned_tasks)
from looptune.graph.memory import plan_arena
from test_graph import mlp, rand, resnet_block


def chain(n=4, size=(64, 64)):
    g = GraphBuilder("chain")
    x = g.input("x", size)
    for i in range(n):
        x = g.op("matmul", x, g.const(f"w{i}", rand(*size)), name=f"mm{i}")
    return g.finish(x)


def test_memory_plan_reuses_the_bytes_of_dead_intermediates():
    from looptune.graph.fuse import fuse
    graph = chain(6)
    groups = fuse(graph)
    steps = [(g.inputs, g.output) for g in groups]
    offsets, total = plan_arena(steps, {id(graph.outputs[0])})
    one = 64 * 64 * 4
    assert len(offsets) == 5 and total == 2 * one  # ping-pong between two buffers
    for (ins, out) in steps:  # no kernel writes where it reads
        if id(out) in offsets:
            assert all(offsets.get(id(v)) != offsets[id(out)] for v in ins)


def test_kernels_of_a_model_larger_than_the_cache_are_timed_cold():
    from looptune.target import Target
    graph = chain(4)  # four 16 KiB weights
    roomy = Target(kind="cpu", cores=2, l3_bytes=1 << 20)
    cramped = Target(kind="cpu", cores=2, l3_bytes=32 << 10)
    warm, cold = model_evaluator(graph, roomy), model_evaluator(graph, cramped, num_threads=1)
    assert not warm.enable_cpu_cache_flush and warm.min_repeat_ms > 0
    # every call cold: one call per measurement, caches flushed before each
    assert cold.enable_cpu_cache_flush and cold.number == 1 and cold.min_repeat_ms == 0
    assert cold.num_threads == 1


@pytest.mark.cc
def test_untuned_models_compile_with_default_schedules_and_match():
    for graph in (mlp(), resnet_block(), chain()):
        compiled = compile_model(graph, None, "cpu", num_threads=1)
        assert not any(t["tuned"] for t in compiled.desc["tasks"])
        x = rand(*graph.inputs[0].shape)
        np.testing.assert_allclose(compiled(x), evaluate(graph, x)[0], rtol=1e-3, atol=1e-3)


@pytest.mark.cc
def test_compiled_model_checks_its_inputs():
    compiled = compile_model(mlp(), None, "cpu", num_threads=1)
    with pytest.raises(ModelError, match=r"input 0 \(x\) must have shape \(1, 784\)"):
        compiled(rand(2, 784))
    with pytest.raises(ModelError, match="takes 1 inputs"):
        compiled(rand(1, 784), rand(1, 784))
    x = rand(1, 784)
    np.testing.assert_allclose(compiled(x.astype("float64")), compiled(x), rtol=1e-6)


@pytest.mark.cc
def test_exported_model_loads_and_runs_in_a_fresh_process(tmp_path):
    graph = resnet_block()
    x = rand(1, 8, 8, 8)
    want = evaluate(graph, x)[0]
    compile_model(graph, None, "cpu", num_threads=1).export(tmp_path / "block.lt")
    np.save(tmp_path / "x.npy", x)
    code = ("import numpy as np, looptune, sys; m = looptune.load(sys.argv[1]); "
            "np.save(sys.argv[3], m(np.load(sys.argv[2])))")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "block.lt"),
                    str(tmp_path / "x.npy"), str(tmp_path / "y.npy")], check=True, timeout=120)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-3, atol=1e-3)
    with pytest.raises(ModelError, match="not an exported looptune model"):
        load(tmp_path)


@pytest.mark.cc
def test_tuned_tasks_are_used_and_a_database_serves_a_related_model(tmp_path):
    small = chain(2)           # two equal matmul layers: one task, weight 2
    db = tune_model(small, "cpu", tmp_path / "work", max_trials_global=8,
                    num_trials_per_iter=4, progress=False, num_threads=1)
    measured = {(r.measure["enable_cpu_cache_flush"], r.measure["num_threads"])
                for r in db.get_all_tuning_records()}
    assert measured == {(False, 1)}  # 32 KiB of weights stay in cache: timed warm
    compiled = compile_model(small, db, "cpu", num_threads=1)
    [info] = compiled.desc["tasks"]  # the tuned record, or the default schedule if faster
    assert info["choice"] in ("tuned", "default") and info["tuned"] == (info["choice"] == "tuned")
    assert info["record_ms"] == min(info["tuned_ms"], info["default_ms"])
    x = rand(64, 64)
    np.testing.assert_allclose(compiled(x), evaluate(small, x)[0], rtol=1e-3, atol=1e-3)
    # a deeper model with the same layer plus a new one: only the new one remains to tune
    g = GraphBuilder("deeper")
    v = g.input("x", (64, 64))
    for i in range(4):
        v = g.op("matmul", v, g.const(f"w{i}", rand(64, 64)))
    v = g.op("relu", g.op("matmul", v, g.const("head", rand(64, 32))))
    deeper = g.finish(v)
    assert [t.task_name for t in extract_tasks(deeper)] == ["fused_matmul", "fused_matmul_relu"]
    assert [t.task_name for t in untuned_tasks(deeper, db)] == ["fused_matmul_relu"]


@pytest.mark.cc
def test_a_tuned_task_without_a_usable_record_warns_and_runs_untuned():
    from looptune.schedule import Schedule
    from looptune.target import Target
    from looptune.tune import MemoryDatabase, TuningRecord
    graph = chain(2)
    task = extract_tasks(graph)[0]
    db = MemoryDatabase()
    wl = db.commit_workload(task.func)
    db.commit_tuning_record(TuningRecord(wl, Schedule(task.func).trace, None, Target.create("cpu"),
                                         error_class="build_error", error_msg="gcc failed"))
    with pytest.warns(UserWarning, match="fused_matmul: .*no successful record.*default schedule"):
        compiled = compile_model(graph, db, "cpu", num_threads=1)
    assert [t["tuned"] for t in compiled.desc["tasks"]] == [False]
    x = rand(64, 64)
    np.testing.assert_allclose(compiled(x), evaluate(graph, x)[0], rtol=1e-3, atol=1e-3)


@pytest.mark.cc
def test_torch_model_compiles_and_matches_torch():
    torch = pytest.importorskip("torch")
    from looptune.frontend.torch import from_torch
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8),
                                      nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            self.a = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8),
                                   nn.ReLU(), nn.Conv2d(8, 8, 3, 1, 1, bias=False),
                                   nn.BatchNorm2d(8))
            self.head = nn.Linear(8, 10)

        def forward(self, x):
            y = self.stem(x)
            y = torch.relu(self.a(y) + y)
            return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))

    net = Net().eval()
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    x = torch.randn(1, 3, 32, 32)
    graph = from_torch(net, (x,))
    compiled = compile_model(graph, None, "cpu", num_threads=1)
    with torch.no_grad():
        want = net(x).numpy()
    np.testing.assert_allclose(compiled(x.numpy()), want, rtol=1e-3, atol=1e-4)


@pytest.mark.cc
@pytest.mark.slow
def test_resnet18_database_serves_resnet34(tmp_path):
    """Every task of ResNet-34 is a task of ResNet-18 (the same layer shapes, more of them):
    after ResNet-18's tasks have records, ResNet-34 has nothing new to tune, and compiles
    with those records."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1] / "benchmarks"))
    from models import ResNet
    from looptune.frontend.torch import from_torch
    x = torch.randn(1, 3, 64, 64)  # small images: the same tasks, quicker to tune
    r18 = from_torch(ResNet((2, 2, 2, 2), classes=10).eval(), (x,))
    r34 = from_torch(ResNet((3, 4, 6, 3), classes=10).eval(), (x,))
    t18, t34 = extract_tasks(r18), extract_tasks(r34)
    assert {t.key for t in t34} <= {t.key for t in t18}
    assert sum(t.weight for t in t34) > sum(t.weight for t in t18)
    # one trial per task (tune_model would weight them; here each needs a record)
    from looptune.tune import tune_tir
    db = tune_tir({t.task_name: t.func for t in t18}, "cpu", tmp_path / "work",
                  max_trials_global=len(t18), num_trials_per_iter=1,
                  task_scheduler="round-robin", progress=False)
    left18 = untuned_tasks(r18, db)  # a trial can fail (a compile timeout on a busy machine)
    assert len(left18) <= 2
    left34 = untuned_tasks(r34, db)
    assert {t.key for t in left34} == {t.key for t in left18}  # nothing new to tune
    compiled = compile_model(r34, db, "cpu", num_threads=1)
    assert sum(t["tuned"] for t in compiled.desc["tasks"]) == len(t34) - len(left34)
    np.testing.assert_allclose(compiled(x.numpy()), evaluate(r34, x.numpy())[0], rtol=2e-3,
                               atol=2e-3)


@pytest.mark.cc
def test_profile_times_each_kernel_in_call_order():
    graph = chain(3)
    compiled = compile_model(graph, None, "cpu", num_threads=1)
    x = rand(*graph.inputs[0].shape)
    prof = compiled.profile(x, repeat=3)
    assert [p["output"] for p in prof] == ["mm0", "mm1", "mm2"]
    assert all(p["kernel"] == "fused_matmul_kernel" and p["ms"] > 0 for p in prof)
    np.testing.assert_allclose(compiled(x), evaluate(graph, x)[0], rtol=1e-3, atol=1e-3)


def _record(db, task, sch, secs, *, baseline=False):
    from looptune.target import Target
    from looptune.tune import TuningRecord
    wl = db.commit_workload(task.func)
    measure = {"num_threads": 1, "enable_cpu_cache_flush": False}
    if baseline:
        measure["baseline"] = "default schedule"
    db.commit_tuning_record(TuningRecord(wl, sch.trace, (secs,), Target.create("cpu"),
                                         measure=measure))


@pytest.mark.cc
def test_compile_model_runs_the_default_schedule_where_it_was_measured_faster():
    """Controlled times: a tuned record slower than the baseline is not applied, a faster
    one is, and the description says which with both times."""
    from looptune.dlight import default_schedule
    from looptune.schedule import Schedule
    from looptune.tune import MemoryDatabase
    graph = chain(2)
    task = extract_tasks(graph)[0]
    for tuned_s, choice in ((2e-3, "default"), (0.5e-3, "tuned")):
        db = MemoryDatabase()
        _record(db, task, Schedule(task.func), tuned_s)  # the unscheduled loops, "tuned"
        _record(db, task, default_schedule(task.func, "cpu"), 1e-3, baseline=True)
        compiled = compile_model(graph, db, "cpu", num_threads=1)
        [info] = compiled.desc["tasks"]
        assert info["choice"] == choice and info["tuned"] == (choice == "tuned")
        assert info["tuned_ms"] == pytest.approx(tuned_s * 1e3)
        assert info["default_ms"] == pytest.approx(1.0)
        assert info["record_ms"] == pytest.approx(min(tuned_s, 1e-3) * 1e3)
        x = rand(64, 64)
        np.testing.assert_allclose(compiled(x), evaluate(graph, x)[0], rtol=1e-3, atol=1e-3)
    assert untuned_tasks(graph, db) == []
    db = MemoryDatabase()  # a baseline alone is no tuning
    _record(db, task, default_schedule(task.func, "cpu"), 1e-3, baseline=True)
    assert [t.task_name for t in untuned_tasks(graph, db)] == ["fused_matmul"]


@pytest.mark.cc
@pytest.mark.slow  # 20-50 s; test_tuned_tasks_are_used checks the same for one task in CI
def test_a_tiny_budget_never_makes_a_task_slower_than_its_default():
    """tune_model times each task's default schedule with the tuning settings; with a
    handful of trials over several tasks, compile_model runs whichever measured faster."""
    import warnings
    from looptune.tune import BudgetWarning
    graph = resnet_block()  # two convolutions and two layout changes: four tasks
    tasks = extract_tasks(graph)
    assert len(tasks) >= 3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        db = tune_model(graph, "cpu", None, database="memory", max_trials_global=6,
                        num_trials_per_iter=4, progress=False, num_threads=1, seed=0)
    assert any(issubclass(w.category, BudgetWarning) for w in caught)  # 6 < 4 x 4 tasks
    baselines = [r for r in db.get_all_tuning_records() if r.baseline]
    assert {r.workload.key for r in baselines} == {t.key for t in tasks}
    assert all(r.ok and r.measure["num_threads"] == 1 for r in baselines)
    assert sum(not r.baseline for r in db.get_all_tuning_records()) == 6
    compiled = compile_model(graph, db, "cpu", num_threads=1)
    for info in compiled.desc["tasks"]:
        assert info["default_ms"] is not None, info
        assert info["record_ms"] <= info["default_ms"], info  # never slower than the default
        if info["tuned_ms"] is not None:
            assert info["record_ms"] == min(info["tuned_ms"], info["default_ms"])
        assert info["choice"] == ("tuned" if info["record_ms"] < info["default_ms"]
                                  else "default")
    x = rand(*graph.inputs[0].shape)
    np.testing.assert_allclose(compiled(x), evaluate(graph, x)[0], rtol=1e-3, atol=1e-3)
