"""Cost models: labels (normalised per workload, failures 0, early aborts never), save/load
round trips without pickle, Kendall tau, learnability on synthetic timings (pure Python), and
a real tuning run (slow)."""
from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from looptune import te
from looptune.target import Target
from looptune.te import ops
from looptune.tune.context import TuneContext
from looptune.tune.cost_model import (CostModel, MLPModel, RandomModel, XGBModel, aggregate,
                                      kendall_tau, normalized_labels)
from looptune.tune.database import MemoryDatabase, TuningRecord
from looptune.tune.feature import FEATURE_VERSION, extract, feature_names
from looptune.tune.runner.base import RunnerResult
from looptune.tune.search_strategy.replay_trace import sample_from

TARGET = Target(kind="cpu", arch="x86_64", features=("avx2", "fma"), cores=2, vector_bits=256,
                l1d_bytes=32 * 1024, l2_bytes=512 * 1024, l3_bytes=16 << 20)
MODELS = [("xgb", {}), ("xgb", {"objective": "rank"}), ("xgb", {"objective": "pack-sum"}),
          ("mlp", {"steps": 60}), ("random", {})]

_CACHE: dict = {}


def candidates(n=90, size=64, seed=0):
    """Design-space samples of a matmul (cached: sampling is the slow part)."""
    key = (n, size, seed)
    if key not in _CACHE:
        func = te.create_prim_func(ops.workload("matmul", M=size, N=size, K=size)[0])
        ctx = TuneContext(func, TARGET, seed=seed)
        spaces = ctx.generate_design_space()
        rand = random.Random(seed)
        out, seen = [], set()
        while len(out) < n:
            c = sample_from(rand.choice(spaces), func, rand.randrange(1 << 30), ctx.postprocs)
            if c is not None and c.sch_hash not in seen:
                seen.add(c.sch_hash)
                out.append(c)
        _CACHE[key] = out
    return _CACHE[key]


def synthetic_secs(cands, seed=0):
    """A made-up timing the features can explain: wider vectors and more unrolling are
    faster, with 10% noise."""
    agg = aggregate(extract(cands, TARGET))
    w, names = len(feature_names()), feature_names()
    score = 0.5 * agg[:, w + names.index("vec_len")] + 0.2 * agg[:, w + names.index("unroll_prod")]
    return 1e-3 * np.exp(-score) * np.random.default_rng(seed).uniform(0.9, 1.1, len(cands))


def results(secs):
    return [RunnerResult(run_secs=(float(s),) * 3) for s in secs]


def make(spec, kw):
    return CostModel.create(spec, target=TARGET, **kw)


# ------------------------------------------------------------------ metric
def test_kendall_tau_hand_made():
    assert kendall_tau([3, 2, 1], [1.0, 2.0, 3.0]) == pytest.approx(1.0)   # faster = higher
    assert kendall_tau([1, 2, 3], [1.0, 2.0, 3.0]) == pytest.approx(-1.0)
    # one discordant pair of three: (2 - 1) / 3
    assert kendall_tau([3, 1, 2], [1.0, 2.0, 3.0]) == pytest.approx(1 / 3)
    # ties (tau-b): x = [1, 1, 2], y order [3, 2, 1] -> (2 - 0) / sqrt(2 * 3)
    assert kendall_tau([1, 1, 2], [3.0, 2.0, 1.0]) == pytest.approx(2 / math.sqrt(6))
    # failures (inf) tie as the slowest
    assert kendall_tau([2, 1, 0, 0], [1.0, 2.0, math.inf, math.inf]) == pytest.approx(1.0)
    assert math.isnan(kendall_tau([1, 1, 1], [1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="predictions"):
        kendall_tau([1, 2], [1.0])


def test_kendall_tau_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    x = rng.integers(0, 6, 300).astype(float)
    s = rng.integers(1, 9, 300).astype(float)
    ours = kendall_tau(x, s, block=37)
    assert ours == pytest.approx(stats.kendalltau(x, -s).statistic, abs=1e-12)


# ------------------------------------------------------------------ labels
def test_labels_normalized_per_workload():
    y = normalized_labels([2.0, 1.0, math.inf, 10.0, 5.0], ["a", "a", "a", "b", "b"])
    assert y.tolist() == [0.5, 1.0, 0.0, 0.5, 1.0]


def test_aborted_early_results_are_not_labels():
    cands = candidates()
    secs = synthetic_secs(cands)
    good, bad = list(range(0, 40)), list(range(40, 60))
    # aborted candidates claim to be the fastest of all: as labels they would change the model
    aborted = [RunnerResult(run_secs=(secs.min() / 10,), aborted_early=True) for _ in bad]
    a, b = make("xgb", {}), make("xgb", {})
    a.update([cands[i] for i in good + bad], results(secs[good]) + aborted)
    b.update([cands[i] for i in good], results(secs[good]))
    assert a.num_trained == b.num_trained == len(good)
    assert np.array_equal(a.predict(cands), b.predict(cands))
    c = make("xgb", {})
    c.update([cands[i] for i in good + bad],
             results(secs[good]) + [RunnerResult(run_secs=r.run_secs) for r in aborted])
    assert not np.array_equal(c.predict(cands), b.predict(cands))


def test_update_checks_lengths():
    with pytest.raises(ValueError, match="one RunnerResult per candidate"):
        make("xgb", {}).update(candidates()[:2], results([1.0]))


# ------------------------------------------------------------------ persistence
@pytest.mark.parametrize("spec,kw", MODELS)
def test_save_load_round_trip_without_pickle(spec, kw, tmp_path):
    cands = candidates()
    secs = synthetic_secs(cands)
    model = make(spec, kw)
    before = model.predict(cands[:5])          # untrained: the prior (random: its own draws)
    if spec != "random":
        assert np.array_equal(before, model.prior(extract(cands[:5], model.target)))
    model.update(cands[:50], results(secs[:50]))
    path = tmp_path / "model.json"
    model.save(path)
    for f in tmp_path.iterdir():              # every file is JSON: no pickle anywhere
        json.loads(f.read_text())
    meta = json.loads(path.read_text())
    assert meta["kind"] == spec and meta["num_trained"] == 50
    assert meta["feature_version"] == FEATURE_VERSION
    loaded = CostModel.load(path)
    assert type(loaded) is type(model) and loaded.num_trained == 50
    assert np.array_equal(loaded.predict(cands[50:]), model.predict(cands[50:]))
    # training goes on after loading
    loaded.update(cands[50:60], results(secs[50:60]))
    assert loaded.num_trained == 60


def test_load_refuses_other_feature_version(tmp_path):
    path = tmp_path / "m.json"
    make("mlp", {"steps": 5}).save(path)
    meta = json.loads(path.read_text())
    meta["feature_version"] = 0
    path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="features version 0.*Retrain"):
        CostModel.load(path)
    path.write_bytes(b"\x80\x04K\x01.")   # a pickle is refused, never unpickled
    with pytest.raises(ValueError, match="not a looptune cost model"):
        CostModel.load(path)
    make("random", {}).save(path)
    with pytest.raises(ValueError, match="RandomModel, not a XGBModel"):
        XGBModel.load(path)


def test_registry():
    assert isinstance(CostModel.create("xgb"), XGBModel)
    assert isinstance(CostModel.create("mlp"), MLPModel)
    m = RandomModel(seed=3)
    assert CostModel.create(m) is m
    with pytest.raises(ValueError, match="registered"):
        CostModel.create("svm")
    with pytest.raises(ValueError, match="objective"):
        XGBModel(objective="huber")


# ------------------------------------------------------------------ learning
@pytest.mark.parametrize("spec,kw", MODELS[:4])
def test_models_learn_synthetic_timings(spec, kw):
    cands = candidates()
    secs = synthetic_secs(cands)
    model = make(spec, dict(kw, steps=200) if spec == "mlp" else kw)
    model.update(cands[:60], results(secs[:60]))
    tau = kendall_tau(model.predict(cands[60:]), secs[60:])
    rand = kendall_tau(make("random", {}).predict(cands[60:]), secs[60:])
    assert tau > 0.4 and tau > rand + 0.2, (tau, rand)


def test_failures_score_low():
    cands = candidates()
    secs = synthetic_secs(cands)
    # the most unrolled third fails (as a compile that times out would)
    agg = aggregate(extract(cands, TARGET))
    w, names = len(feature_names()), feature_names()
    unroll = agg[:, w + names.index("unroll_prod")]
    secs[unroll >= np.quantile(unroll, 2 / 3)] = math.inf
    res = [RunnerResult(error_class="run_error") if math.isinf(s) else RunnerResult(run_secs=(s,))
           for s in secs]
    model = make("xgb", {})
    model.update(cands[:60], res[:60])
    pred = model.predict(cands[60:])
    failed = np.isinf(secs[60:])
    assert pred[failed].mean() < pred[~failed].mean()


def test_warm_start_from_other_workloads():
    """Records of one workload train a model; the excluded workload contributes nothing."""
    cands = candidates()
    secs = synthetic_secs(cands)
    other = candidates(n=30, size=48, seed=1)
    other_secs = synthetic_secs(other, seed=1)
    db = MemoryDatabase()
    for group, ss in ((cands[:40], secs[:40]), (other, other_secs)):
        wl = db.commit_workload(group[0].sch.original)
        for c, s in zip(group, ss):
            db.commit_tuning_record(TuningRecord(wl, c.sch.trace, (float(s),), TARGET))
    aborted_wl = db.commit_workload(other[0].sch.original)
    db.commit_tuning_record(TuningRecord(aborted_wl, other[0].sch.trace, (1e-9,), TARGET,
                                         measure={"aborted_early": True}))
    model = make("xgb", {})
    used = model.warm_start(db, TARGET, exclude=cands[0].sch.original)
    assert used == model.num_trained == 30    # only `other`, and not its aborted record
    tau = kendall_tau(model.predict(cands[40:]), secs[40:])
    assert tau > 0.2, tau
    assert make("random", {}).warm_start(db, TARGET) == 0


# ------------------------------------------------------------------ a real tuning run
@pytest.mark.cc
@pytest.mark.slow
def test_models_rank_real_measurements(tmp_path):
    """matmul_add 256: 150 ReplayTrace candidates measured in full (early abort off, so every
    one is a label); train on 100, rank the other 50."""
    from looptune.schedule import Schedule
    from looptune.tune import Builder, MemoryDatabase, Runner, TaskScheduler
    from looptune.tune.runner.base import EvaluatorConfig
    from looptune.tune.search_strategy.base import MeasureCandidate
    func = te.create_prim_func(ops.workload("matmul_add", M=256, N=256, K=256)[0])
    db, runner = MemoryDatabase(), Runner.create("local")
    try:
        TaskScheduler.create("round-robin").tune(
            [TuneContext(func, "cpu", seed=0, search_strategy="replay-trace")],
            max_trials_global=150, max_trials_per_task=None,
            num_trials_per_iter=50, builder=Builder.create("local"), runner=runner, database=db,
            evaluator=EvaluatorConfig(num_threads=1, repeat=3), abort_ratio=math.inf,
            progress=False)
    finally:
        runner.close()
    cands, secs = [], []
    for r in db.get_all_tuning_records():
        sch = Schedule(func, seed=0)
        r.trace.apply_to_schedule(sch)
        cands.append(MeasureCandidate(sch, r.sch_hash or ""))
        secs.append(r.median_secs)
    secs = np.array(secs)
    order = np.random.default_rng(0).permutation(len(cands))
    train, test = order[:100], order[100:]
    assert len(test) >= 40
    for spec in ("xgb", "mlp"):
        model = CostModel.create(spec)
        model.update([cands[i] for i in train],
                     [RunnerResult(run_secs=(s,)) if math.isfinite(s) else
                      RunnerResult(error_class="run_error") for s in secs[train]])
        tau = kendall_tau(model.predict([cands[i] for i in test]), secs[test])
        assert tau > 0.15, (spec, tau)


# ------------------------------------------------------------------ the analytic prior
def test_prior_prefers_register_tiles_and_penalises_spills():
    from test_feature import _hand, _register_tiled
    scalar = _hand(vec=False, unroll=False, par=False)
    vector = _hand()                      # 4 lanes of 8, one accumulator
    tiled = _register_tiled(4, 16)        # 4 x 2 registers of accumulators
    spilled = _register_tiled(16, 64)     # 128 registers: far more than AVX2's 16
    model = XGBModel(target=TARGET)
    s = model.prior(extract([scalar, vector, tiled, spilled], TARGET))
    assert s[0] < s[1] < s[2] and s[3] < s[2], s


def test_xgb_starts_from_the_prior_and_the_trees_take_over_when_they_rank_better():
    cands = candidates()
    model = make("xgb", {})
    prior = model.prior(extract(cands, TARGET))
    # timings that agree with the prior: with 30 measurements the prior alone decides
    secs = 1e-3 * np.exp(-prior) * np.random.default_rng(0).uniform(0.9, 1.1, len(cands))
    model.update(cands[:30], results(secs[:30]))
    assert model.blend == 0
    assert kendall_tau(model.predict(cands[30:]), -prior[30:]) == pytest.approx(1.0)
    # timings the prior gets backwards: the trees learn them and take over
    model = make("xgb", {})
    secs = 1e-3 * np.exp(prior) * np.random.default_rng(0).uniform(0.9, 1.1, len(cands))
    assert kendall_tau(prior[60:], secs[60:]) < -0.5
    model.update(cands[:60], results(secs[:60]))
    assert model.blend > 0
    assert kendall_tau(model.predict(cands[60:]), secs[60:]) > 0.4


# ------------------------------------------------------------------------------ GPU prior
def _gpu_cycles(sch, target):
    from looptune.tune.cost_model.prior import gpu_estimated_cycles
    (rows,) = extract([sch], target)
    return gpu_estimated_cycles(rows, target.cores)


def _copy(threads_along: str, threads: int = 32):
    """B[i, j] = A[i, j] (256 x 256), a thread per element, consecutive threads along j
    (reading consecutive elements) or along i (256 elements apart)."""
    from looptune import Schedule
    a = te.placeholder((256, 256), name="A")
    b = te.compute((256, 256), lambda i, j: a[i, j] * 2.0, name="B")
    sch = Schedule(te.create_prim_func([a, b]))
    i, j = sch.get_loops(sch.get_block("B"))
    if threads_along == "i":
        sch.reorder(j, i)
        i, j = j, i
    o, t = sch.split(j, [None, threads])
    sch.bind(sch.fuse(i, o), "blockIdx.x")
    sch.bind(t, "threadIdx.x")
    return sch


def test_gpu_prior_orders_the_obvious_cases():
    from looptune.dlight import apply_rules, default_schedule
    from looptune.target import cuda_target
    gpu = cuda_target("sm_80")
    func = te.create_prim_func(ops.workload("matmul", M=512, N=512, K=512)[0])
    tiled = _gpu_cycles(default_schedule(func, gpu), gpu)
    per_output = _gpu_cycles(apply_rules(func, gpu, rules=["gpu-fallback"])[1], gpu)
    # shared tiles and register tiles beat a thread per output reading global memory
    assert tiled * 3 < per_output
    # coalesced beats strided; whole warps beat blocks of 8 threads
    assert _gpu_cycles(_copy("j"), gpu) * 4 < _gpu_cycles(_copy("i"), gpu)
    assert _gpu_cycles(_copy("j", 32), gpu) * 2 < _gpu_cycles(_copy("j", 8), gpu)


def test_a_model_made_without_a_target_takes_the_tasks():
    from looptune.target import cuda_target
    from looptune.tune.search_strategy.evolutionary import EvolutionarySearch
    gpu = cuda_target("sm_80")
    func = te.create_prim_func(ops.workload("matmul", M=64, N=64, K=64)[0])
    strategy = EvolutionarySearch(cost_model="xgb")
    TuneContext(func, target=gpu, search_strategy=strategy, seed=0)
    assert strategy.cost_model.target is gpu
    kept = XGBModel(target=Target.create("cpu"))
    strategy = EvolutionarySearch(cost_model=kept)
    TuneContext(func, target=gpu, search_strategy=strategy, seed=0)
    assert kept.target.kind == "cpu"
