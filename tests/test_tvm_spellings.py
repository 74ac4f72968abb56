"""TVM's spellings over looptune's engine (auto_scheduler, meta_schedule, autotvm's te
schedules, target strings, nd / build / lower): each seed tutorial under examples/ runs at a
small size and computes what numpy (or torch) computes, and the pieces behave as TVM users
expect."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

import looptune as tvm
from looptune import auto_scheduler, te
from looptune import meta_schedule as ms
from looptune.build import generate_source
from looptune.runtime import BuildError
from looptune.target import TargetError, host
from looptune.target.cpus import X86_CPUS
from looptune.tune import TuneError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# tuning here is a few trials on purpose: the engine's note that so few cannot search is expected
pytestmark = pytest.mark.filterwarnings("ignore::looptune.tune.BudgetWarning")


def _example(name: str):
    sys.path.insert(0, str(EXAMPLES))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(EXAMPLES))


def _matmul(n, m, k, name="C"):
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name=name)
    return A, B, C


def _x86_host() -> bool:
    return host().arch == "x86_64"


# ------------------------------------------------------------------------------ targets
def test_target_strings_name_the_isa_of_their_cpu():
    avx2 = tvm.target.Target("llvm -mcpu=core-avx2")
    assert avx2.kind == "cpu" and avx2.vector_bits == 256
    assert {"avx2", "fma"} <= set(avx2.features) and "avx512f" not in avx2.features
    skx = tvm.target.Target("llvm -mcpu=skylake-avx512")
    assert skx.vector_bits == 512 and {"avx512f", "avx512bw", "avx512vl"} <= set(skx.features)
    zen3 = tvm.target.Target("llvm -mcpu=znver3")
    assert "vaes" in zen3.features and "avx512f" not in zen3.features
    assert tvm.target.Target.create("llvm -mcpu=znver3") == zen3
    assert avx2.cores == host().cores  # this machine's cores and caches
    assert tvm.target.Target("llvm") == host()
    mattr = tvm.target.Target("llvm -mattr=+avx2,+fma -num-cores=3")
    assert {"avx2", "fma"} <= set(mattr.features) and mattr.cores == 3
    assert tvm.target.Target("cuda -arch=sm_80").arch == "sm_80"
    # a Target built from fields is left as it is
    assert tvm.target.Target(kind="cpu", cores=5).cores == 5


def test_bad_target_strings_say_what_is_known():
    with pytest.raises(TargetError, match="unknown -mcpu=pentium.*skylake-avx512"):
        tvm.target.Target("llvm -mcpu=pentium")
    with pytest.raises(TargetError, match="-mfoo"):
        tvm.target.Target.create("llvm -mfoo=1")
    with pytest.raises(TargetError, match="-mattr item"):
        tvm.target.Target("llvm -mattr=avx2")


@pytest.mark.cc
def test_mcpu_the_host_has_builds_for_that_isa_and_runs(rng):
    if not _x86_host() or host().lacks({"features": list(X86_CPUS["core-avx2"])}):
        pytest.skip("needs an x86 host with AVX2")
    A, B, C = _matmul(16, 32, 8)
    sch = tvm.Schedule(te.create_prim_func([A, B, C]))
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(i, k, j)
    sch.vectorize(j)
    mod = tvm.build(sch, [A, B, C], "llvm -mcpu=core-avx2")
    assert "avx512f" not in mod.artifact.isa["features"] and "avx2" in mod.artifact.isa["features"]
    a, b = rng.standard_normal((16, 8), np.float32), rng.standard_normal((8, 32), np.float32)
    c = tvm.nd.empty((16, 32), "float32")
    mod(tvm.nd.array(a), tvm.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.cc
def test_mcpu_the_host_lacks_is_refused_where_code_must_run_here():
    lacking = [name for name, feats in X86_CPUS.items()
               if host().lacks({"arch": "x86_64", "features": list(feats)})]
    if not _x86_host() or not lacking:
        pytest.skip("this host has every ISA the CPU table names")
    spec = f"llvm -mcpu={lacking[-1]}"
    A, B, C = _matmul(8, 8, 8)
    func = te.create_prim_func([A, B, C])
    _, source = generate_source(func, spec)  # C for it is made all the same
    assert "C" in source
    with pytest.raises(BuildError, match="lacks"):
        tvm.build(func, spec)
    with pytest.raises(TuneError, match="lacks .*tune for this machine"):
        ms.tune_tir(func, spec, max_trials_global=1, database=tvm.tune.MemoryDatabase())


# --------------------------------------------------------------- te, build, lower, nd
def test_layout_free_placeholders_is_a_hint_that_reaches_the_database(tmp_path):
    A, B, C = _matmul(8, 8, 8)
    Bt = te.placeholder((8, 8), name="Bt")
    k = te.reduce_axis((0, 8), name="k")
    D = te.compute((8, 8), lambda i, j: te.sum(A[i, k] * Bt[k, j], axis=k), name="D",
                   attrs={"layout_free_placeholders": [Bt]})
    assert D.op.layout_free == (Bt,)
    func = te.create_prim_func([A, Bt, D])
    db = tvm.tune.JSONDatabase(tmp_path)
    wl = db.commit_workload(func)  # the annotation is plain data: it serializes
    assert tvm.tune.JSONDatabase(tmp_path).has_workload(func) and wl.key
    with pytest.raises(te.TEError, match="does not read"):
        te.compute((8, 8), lambda i, j: A[i, j] * 2, attrs={"layout_free_placeholders": [B]})
    with pytest.raises(te.TEError, match="not plain data"):
        te.compute((8, 8), lambda i, j: A[i, j] * 2, attrs={"x": B})


@pytest.mark.cc
def test_te_create_schedule_stages_schedule_the_loops(rng):
    A, B, C = _matmul(32, 48, 16)
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    yo, yi = s[C].split(i, factor=8)
    xo, xi = s[C].split(j, nparts=3)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(yo, xo, ko, yi, ki, xi)
    s[C].vectorize(xi)
    s[C].unroll(ki)
    s[C].parallel(s[C].fuse(yo, xo))
    s[C].pragma(yo, "auto_unroll_max_step", 16)
    print(tvm.lower(s.sch, [A, B, C], simple_mode=True))
    func = tvm.build(s.sch, [A, B, C], "llvm")
    a, b = rng.standard_normal((32, 16), np.float32), rng.standard_normal((16, 48), np.float32)
    c = np.full((32, 48), np.nan, np.float32)
    func(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(BuildError, match="not the parameters"):
        tvm.build(s.sch, [B, A, C], "llvm")
    with pytest.raises(te.TEError, match="parameters in order"):
        s.check_args([B, A, C])


@pytest.mark.cc
def test_time_evaluator_takes_tvms_positional_arguments(rng):
    A, B, C = _matmul(8, 8, 8)
    func = tvm.build(te.create_prim_func([A, B, C]))
    arrays = [tvm.nd.array(rng.standard_normal((8, 8), np.float32)) for _ in range(2)]
    out = tvm.nd.empty((8, 8))
    res = func.time_evaluator(func.entry_name, tvm.cpu(), number=2, repeat=2)(*arrays, out)
    assert len(res.results) == 2 and all(t > 0 for t in res.results)
    np.testing.assert_allclose(out.numpy(), arrays[0].numpy() @ arrays[1].numpy(), rtol=1e-5,
                               atol=1e-5)


# ----------------------------------------------------------------------- auto_scheduler
@pytest.mark.cc
def test_seed004_auto_scheduler_example_at_a_small_size(tmp_path):
    seed = _example("seed004_auto_scheduler_matmul")
    log = tmp_path / "matmul.json"
    got, want = seed.main(48, 3, 2, 5, str(log))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    # the log is TVM's file, one record a line; the resume measured 2 new candidates
    records = auto_scheduler.load_records(log)
    assert len([r for r in records if not r.baseline]) == 5
    assert len(log.read_text().splitlines()) == len(records)


def test_compute_dag_prints_as_ansor_prints_it():
    @auto_scheduler.register_workload
    def tvm_spelling_dag(n):
        A, B, C = _matmul(n, n, n, name="matmul")
        out = te.compute((n, n), lambda i, j: C[i, j] + 1.0, name="out")
        return [A, B, out]

    task = auto_scheduler.SearchTask(func="tvm_spelling_dag", args=(16,), target="llvm")
    text = str(task.compute_dag)
    assert text.splitlines() == ["A = PLACEHOLDER [16, 16]", "B = PLACEHOLDER [16, 16]",
                                 "matmul(i, j) += A[i, k] * B[k, j]",
                                 "out(i, j) = matmul[i, j] + 1.0"]


# ------------------------------------------------------------------------ meta_schedule
@pytest.mark.cc
def test_seed000_meta_schedule_example_at_a_small_size(tmp_path):
    got, want = _example("seed000_meta_schedule_matmul").main(32, 3, 3, str(tmp_path / "w"))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert {p.name for p in (tmp_path / "w").iterdir()} == {
        "database_workload.json", "database_tuning_record.json"}


@pytest.mark.cc
def test_json_database_files_where_metaschedule_says(tmp_path, rng):
    A, B, C = _matmul(16, 16, 16)
    mod = tvm.IRModule({"main": te.create_prim_func([A, B, C])})
    db = ms.database.JSONDatabase(path_workload=tmp_path / "a" / "wl.json",
                                  path_tuning_record=tmp_path / "b" / "rec.json")
    ms.tune_tir(mod=mod, target="llvm", max_trials_global=2, num_trials_per_iter=2,
                database=db, progress=False)
    assert (tmp_path / "a" / "wl.json").exists() and (tmp_path / "b" / "rec.json").exists()
    again = ms.database.JSONDatabase(path_workload=tmp_path / "a" / "wl.json",
                                     path_tuning_record=tmp_path / "b" / "rec.json")
    top = again.get_top_k(again.commit_workload(mod), top_k=1)
    assert len(top) == 1
    sch = top[0].as_schedule()
    lib = tvm.build(sch)
    a, b = rng.standard_normal((16, 16), np.float32), rng.standard_normal((16, 16), np.float32)
    c = np.empty((16, 16), np.float32)
    lib(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(AttributeError, match="from_torch"):
        ms.relay_integration  # noqa: B018


# ------------------------------------------------------------------------------ autotvm
@pytest.mark.cc
def test_seed003_autotvm_example_at_a_small_size():
    for name, got, want in _example("seed003_autotvm_search_space").main(32, 3, ("xgb", "ga")):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.cc
def test_seed001_autotvm_and_ansor_example_at_a_small_size(tmp_path):
    for got, want in _example("seed001_autotvm_and_ansor").main(32, 4, 3, str(tmp_path),
                                                               "llvm"):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.cc
def test_seed002_model_database_example_at_a_small_size(tmp_path):
    pytest.importorskip("torch")
    got, want = _example("seed002_meta_schedule_database").main(
        4, 2, str(tmp_path / "local"), str(tmp_path / "shared"))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
