"""The CUDA builder of the tuning engine: GPU schedules compile (with nvcc, or NVRTC where
cuda-python has it) into the artifacts CudaRunner loads, failures become build records, and
the reference a GPU candidate is checked against is a CPU build. No GPU needed."""
from __future__ import annotations

import json
import shutil

import pytest

import gpu_schedules as gs
from looptune.target import Target
from looptune.tune.builder import Builder, BuilderInput
from looptune.tune.measure import build_reference


def _have_cuda_compiler() -> bool:
    from looptune.runtime.cuda_compile import _nvrtc_version
    return shutil.which("nvcc") is not None or _nvrtc_version() is not None


needs_compiler = pytest.mark.skipif(not _have_cuda_compiler(), reason="needs nvcc or NVRTC")
CUDA = Target.create("cuda")


@needs_compiler
def test_gpu_schedules_build_into_loadable_artifacts_and_identical_sources_compile_once():
    builder = Builder.create("cuda", max_workers=2)
    funcs = [gs.shared_matmul().func, gs.softmax().func, gs.shared_matmul().func]
    results = builder.build([BuilderInput(f, CUDA, {"trace": "test"}) for f in funcs])
    assert all(r.ok for r in results), [r.error_msg for r in results]
    assert results[0].source_hash == results[2].source_hash
    assert results[0].artifact == results[2].artifact
    desc = json.loads(open(results[1].artifact).read())
    assert [k["grid"] for k in desc["kernels"]] == [[5, 1, 1]]
    assert [a["name"] for a in desc["args"]] == ["X", "softmax"]


def test_an_unbound_schedule_is_a_build_error_record_not_an_exception():
    func, _, _ = gs.func_of("matmul", M=8, N=8, K=8)
    (res,) = Builder.create("cuda").build([BuilderInput(func, CUDA, {})])
    assert res.error_class == "build_error"
    assert "not bound to GPU threads" in res.error_msg


def test_the_cuda_builder_refuses_a_cpu_target():
    (res,) = Builder.create("cuda").build([BuilderInput(gs.softmax().func, Target.create("cpu"))])
    assert res.error_class == "build_error" and "builder='local'" in res.error_msg


@pytest.mark.cc
def test_the_reference_of_a_gpu_task_is_built_for_the_host():
    func, _, _ = gs.func_of("softmax", M=4, N=8)
    artifact, symbol = build_reference(Builder.create("cuda"), func, CUDA, "softmax")
    assert artifact.endswith(".so") and symbol.endswith("_kernel")


@pytest.mark.cc
@pytest.mark.parametrize("name,shape", [
    ("matmul", dict(M=64, N=48, K=32)), ("softmax", dict(M=16, N=100)),
    ("conv2d", dict(N=1, C=4, H=8, W=8, K=8, R=3, S=3, stride=1, pad=1, dilation=1))])
def test_the_reference_of_a_gpu_task_uses_every_core_and_computes_the_same(name, shape):
    """A GPU task's reference is fast at GPU sizes (a 4096^3 matmul took ~15 s on one core,
    unscheduled): its innermost spatial loop moves inside the reductions (each output sums in
    the same order), its outermost loop of more than one iteration is parallel (conv2d's
    batch of 1 is skipped), and its outputs are the unscheduled ones (up to the C compiler's
    FMA contraction, which differs between the two loop nests)."""
    import numpy as np
    import looptune as lt
    from looptune.build import args_info, generate_source
    from looptune.runtime.module import Module
    from looptune.tune.measure import outer_loops_parallel
    func, _, _ = gs.func_of(name, **shape)
    artifact, symbol = build_reference(Builder.create("cuda"), func, CUDA, name)
    parallel = outer_loops_parallel(func)
    source = generate_source(parallel, "cpu")[1]
    assert "omp parallel" in source
    if name != "softmax":  # matmul and conv2d: the inner loop runs along the output row
        from looptune.schedule import Schedule
        sch = Schedule(parallel)
        block = sch.get_block({"matmul": "matmul", "conv2d": "conv2d_nchw"}[name])
        inner = sch.get(sch.get_loops(block)[-1]).loop_var.name
        assert inner == {"matmul": "j", "conv2d": "x"}[name], inner
    rng = np.random.default_rng(3)
    ins = [rng.uniform(-1, 1, [int(x) for x in b.shape]).astype("float32")
           for b in func.params[:-1]]
    want = np.full([int(x) for x in func.params[-1].shape], np.nan, "float32")
    got = want.copy()
    lt.build(func, "cpu")(*ins, want)
    ref = Module(artifact, symbol, args_info(func), "")
    ref.set_num_threads(2)
    ref(*ins, got)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@needs_compiler
@pytest.mark.parametrize("name,shape", [
    ("matmul", dict(M=1024, N=1024, K=512)),
    ("conv2d", dict(N=1, C=32, H=28, W=28, K=64, R=3, S=3, stride=1, pad=1, dilation=1)),
    ("softmax", dict(M=512, N=2048)),
    ("layer_norm", dict(M=256, N=768)),
    ("dense", dict(batch=64, in_features=512, out_features=256))])
def test_sampled_candidates_of_the_cuda_design_space_compile(name, shape):
    """What the tuner builds: random samples of the cuda design spaces (virtual threads
    pushed down, warp-shuffle and shared-memory reductions, cooperative fetches, vector
    copies) at realistic sizes, through the CUDA builder: every one compiles."""
    from looptune import te
    from looptune.te.ops import workload
    from looptune.tune import TuneContext
    from looptune.tune.search_strategy.replay_trace import sample_from
    target = Target.create("cuda")
    func = te.create_prim_func(workload(name, **shape)[0])
    ctx = TuneContext(func, target=target, seed=0)
    spaces = ctx.generate_design_space()
    cands = [c for c in (sample_from(spaces[i % len(spaces)], ctx.func, i, ctx.postprocs)
                         for i in range(10)) if c is not None][:4]
    assert cands
    results = Builder.create("cuda", max_workers=2).build(
        [BuilderInput(c.sch.func, target, {}) for c in cands])
    assert all(r.ok for r in results), [r.error_msg for r in results]


@pytest.mark.cc
def test_compile_tirs_check_runs_its_reference_on_every_cpu(monkeypatch):
    """verify (compile_tir's check) gives its reference every CPU explicitly: under
    OMP_NUM_THREADS=1 (as the benchmarks set it) the GPU-sized reference ran on one core and
    the check took minutes."""
    import os
    import looptune as lt
    from looptune.backend.cpu import CPUBackend
    from looptune.tune.tune import verify
    func, _, _ = gs.func_of("matmul", M=32, N=16, K=8)
    seen = []
    real = CPUBackend.build

    def build(self, sch_or_func, **kw):
        seen.append(kw.get("num_threads"))
        return real(self, sch_or_func, **kw)

    mod = lt.build(func, "cpu")
    monkeypatch.setattr(CPUBackend, "build", build)
    assert verify(mod, func)
    assert seen == [len(os.sched_getaffinity(0))]
