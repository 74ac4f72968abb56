"""The GPU schedule rules, postprocessors and mutator (pure Python, no GPU): cuda design
spaces of matmul, conv2d, softmax, layer_norm, a row sum and elementwise ops; random samples
of them run thread by thread by the interpreter and checked against numpy; traces round-trip
through JSON; MutateThreadBinding; what VerifyGPUCode refuses and says; the CPU spaces are
unchanged."""
from __future__ import annotations

import hashlib
import json
import random
from collections import Counter

import numpy as np
import pytest

from looptune import Schedule, te
from looptune.codegen.gpu import lower_gpu
from looptune.schedule import Trace
from looptune.target import Target, cuda_target
from looptune.te.ops import workload
from looptune.tir import interpreter, structural_equal
from looptune.tir.functor import find_stmts
from looptune.tir.stmt import For
from looptune.tune import TuneContext
from looptune.tune.defaults import DEFAULT_RULES, default_mutators, default_postprocs
from looptune.tune.mutator import Mutator
from looptune.tune.postproc import RewriteUnboundBlock, VerifyGPUCode
from looptune.tune.postproc.rewrite_unbound_block import unbound_nests
from looptune.tune.postproc.verify_gpu import gpu_code_errors
from looptune.tune.schedule_rule import AutoBind
from looptune.tune.search_strategy.replay_trace import sample_from
from looptune.tune.search_strategy.space import DesignSpace, finish_point, replay
from looptune.tune.space_generator import PostOrderApply

TARGET = cuda_target("sm_80")  # a named architecture: its limits, no driver needed

CASES = {
    "matmul": dict(M=16, N=12, K=8),
    "conv2d": dict(N=1, C=3, H=7, W=6, K=4, R=3, S=3, stride=1, pad=1, dilation=1),
    "softmax": dict(M=5, N=11),
    "layer_norm": dict(M=4, N=13),
    "reduce_sum": dict(M=7, N=13),
    "matmul_add": dict(M=12, N=10, K=7),
    "relu": dict(N=1, C=2, H=5, W=7),
}


def context(name, seed=0, target=TARGET, **kw):
    tensors, ref, _ = workload(name, **CASES[name])
    return TuneContext(te.create_prim_func(tensors), target=target, seed=seed, **kw), tensors, ref


def inputs(tensors, seed=0):
    """Random values away from zero, so a missed write or a wrong product shows."""
    rng = np.random.default_rng(seed)
    return [(rng.uniform(0.5, 1.5, t.shape) * rng.choice([-1, 1], t.shape)).astype(t.dtype)
            for t in tensors[:-1]]


def run(func, tensors, ins):
    """`func` on `ins`: thread by thread (GPU semantics, races are errors)."""
    out = np.full(tensors[-1].shape, np.nan, tensors[-1].dtype)
    interpreter.run(func, *ins, out)
    return out


def kinds(sch) -> Counter:
    return Counter(i.kind.name for i in sch.trace.insts)


def bound_loops(func, prefix: str) -> list:
    return [lp for lp in find_stmts(func.body, For)
            if lp.kind == "thread_binding" and lp.thread.startswith(prefix)]


# ------------------------------------------------------------------------------ correctness
@pytest.mark.parametrize("name", sorted(CASES))
def test_sampled_gpu_schedules_match_numpy_thread_by_thread(name):
    ctx, tensors, ref = context(name)
    spaces = ctx.generate_design_space()
    ins = inputs(tensors)
    want = ref(*ins)
    n, checked = 2 * max(3, len(spaces)), 0
    for seed in range(n):
        cand = sample_from(spaces[seed % len(spaces)], ctx.func, seed, ctx.postprocs)
        if cand is None:  # verify-gpu-code refused it (too many vthreads, ...)
            continue
        assert not unbound_nests(cand.sch.func), cand.sch.trace
        np.testing.assert_allclose(run(cand.sch.func, tensors, ins), want, rtol=1e-4,
                                   atol=1e-4, err_msg=str(cand.sch.trace))
        checked += 1
    assert checked >= n * 2 // 3


# ------------------------------------------------------------------------------ structure
def test_matmul_space_is_sssrrsrs_bound_with_shared_inputs_and_a_local_accumulator():
    ctx, tensors, ref = context("matmul")
    (space,) = ctx.generate_design_space()
    k = kinds(space)
    assert [i.attrs[0] for i in space.trace.insts if i.kind.name == "SamplePerfectTile"] == \
        [5, 5, 3]
    assert [i.attrs[0] for i in space.trace.insts if i.kind.name == "Bind"] == \
        ["blockIdx.x", "vthread.x", "threadIdx.x"]
    assert [i.attrs[-1] for i in space.trace.insts if i.kind.name == "CacheRead"] == \
        ["shared", "shared"]
    assert [i.attrs[-1] for i in space.trace.insts if i.kind.name == "CacheWrite"] == ["local"]
    assert k["ComputeAt"] == 2 and k["ReverseComputeAt"] == 1
    # the copies into shared memory are marked for cooperative fetching, with a vector length
    assert "meta_schedule.cooperative_fetch" in str(space.trace)

    vectorized = 0
    for seed in range(8):
        cand = sample_from(space, ctx.func, seed, ctx.postprocs)
        if cand is None:
            continue
        func = cand.sch.func
        (compute_tx,) = [lp for lp in cand.sch.enclosing_loops("matmul")
                         if lp.kind == "thread_binding" and lp.thread == "threadIdx.x"]
        for name in ("A_shared", "B_shared"):
            loops = cand.sch.enclosing_loops(name)
            copy_tx = [lp for lp in loops if lp.kind == "thread_binding"][-1]
            assert copy_tx.thread == "threadIdx.x" and copy_tx.extent == compute_tx.extent
            assert all(lp.extent in (2, 4) for lp in loops if lp.kind == "vectorized")
            vectorized += any(lp.kind == "vectorized" for lp in loops)
            assert not cand.sch.get(cand.sch.get_block(name)).annotations  # rewritten
        (kernel,) = lower_gpu(func, TARGET, vectorize=False).kernels
        assert {b.name for b in kernel.shared} == {"A_shared", "B_shared"}
    assert vectorized  # a sampled vector length of 2 or 4: float2 / float4 copies


def test_conv2d_inlines_the_padding_and_tiles_seven_loops():
    ctx, _, _ = context("conv2d")
    (space,) = ctx.generate_design_space()
    assert kinds(space)["ComputeInline"] == 1
    assert [i.attrs[0] for i in space.trace.insts if i.kind.name == "SamplePerfectTile"] == \
        [5, 5, 5, 5, 3, 3, 3]


def test_an_elementwise_epilogue_is_inlined_into_the_write_back():
    ctx, _, _ = context("matmul_add")
    (space,) = ctx.generate_design_space()
    assert kinds(space)["ReverseComputeInline"] == 1
    cand = sample_from(space, ctx.func, 0, ctx.postprocs)
    assert len(lower_gpu(cand.sch.func, TARGET).kernels) == 1


@pytest.mark.parametrize("name", ["softmax", "layer_norm"])
def test_row_stages_fuse_into_one_kernel_with_one_thread_count(name):
    ctx, tensors, _ = context(name)
    spaces = ctx.generate_design_space()
    assert len(spaces) == 4  # with or without cross-thread reduction, per reduction
    fused = spaces[0]
    cand = sample_from(fused, ctx.func, 0, ctx.postprocs)
    (kernel,) = lower_gpu(cand.sch.func, TARGET, vectorize=False).kernels
    assert kernel.grid == (tensors[0].shape[0], 1, 1)  # a thread block per row
    # one sampled thread count splits both reductions and the output
    (sample,) = [i for i in fused.trace.insts if i.kind.name == "SampleCategorical"
                 and i.attrs[0][0] == 4]  # the thread counts 4, 8, 16 (not the unroll depths)
    uses = [i for i in fused.trace.insts if i.kind.name == "Split" and sample.outputs[0] in i.inputs]
    assert len(uses) == 3
    assert len(bound_loops(cand.sch.func, "threadIdx")) == 3
    # and the space without cross-thread reduction runs each stage as a kernel of its own
    plain = sample_from(spaces[-1], ctx.func, 0, ctx.postprocs)
    assert len(lower_gpu(plain.sch.func, TARGET, vectorize=False).kernels) == 3


def test_a_row_sum_reduces_across_threads():
    ctx, _, _ = context("reduce_sum")
    spaces = ctx.generate_design_space()
    assert len(spaces) == 2
    cand = sample_from(spaces[0], ctx.func, 0, ctx.postprocs)
    (tx,) = bound_loops(cand.sch.func, "threadIdx")
    assert tx.extent in (4, 8, 16)  # candidates up to the row length rounded up (13 -> 16)
    (bx,) = bound_loops(cand.sch.func, "blockIdx")
    assert bx.extent == 7  # a thread block per row


def test_auto_bind_runs_the_grid_several_times_beyond_max_blocks():
    tensors, ref, _ = workload("relu", **CASES["relu"])  # 70 elements
    rules = [AutoBind(thread_extents=(8, 16), max_blocks=2)]
    ctx = TuneContext(te.create_prim_func(tensors), target=TARGET, seed=0,
                      space_generator=PostOrderApply(sch_rules=rules))
    (space,) = ctx.generate_design_space()
    ins = inputs(tensors)
    for seed in range(3):
        cand = sample_from(space, ctx.func, seed, ctx.postprocs)
        (bx,) = bound_loops(cand.sch.func, "blockIdx")
        (tx,) = bound_loops(cand.sch.func, "threadIdx")
        assert bx.extent == 2 and tx.extent in (8, 16)
        assert find_stmts(cand.sch.func.body, For)[0].kind == "serial"  # o, around the grid
        np.testing.assert_allclose(run(cand.sch.func, tensors, ins), ref(*ins))


def test_rewrite_unbound_block_binds_what_no_rule_did():
    tensors, ref, _ = workload("relu", **CASES["relu"])
    sch = Schedule(te.create_prim_func(tensors))
    assert unbound_nests(sch.func) == [["relu"]]
    post = RewriteUnboundBlock()
    post.initialize_with_tune_context(TuneContext(sch.func, target=TARGET, seed=0))
    sch.enter_postproc()
    assert post.apply(sch)
    assert not unbound_nests(sch.func)
    ins = inputs(tensors)
    np.testing.assert_allclose(run(sch.func, tensors, ins), ref(*ins))


# ------------------------------------------------------------------------------ traces
@pytest.mark.parametrize("name", ["matmul", "softmax"])
def test_a_gpu_trace_round_trips_through_json_and_replays(name):
    ctx, tensors, ref = context(name)
    spaces = ctx.generate_design_space()
    cand = next(c for c in (sample_from(spaces[s % len(spaces)], ctx.func, s, ctx.postprocs)
                            for s in range(10)) if c is not None)
    text = json.dumps(cand.sch.trace.to_json())
    trace = Trace.from_json(json.loads(text))
    assert json.dumps(trace.to_json()) == text
    fresh = Schedule(ctx.func)
    trace.apply_to_schedule(fresh)  # the postprocessing part too: the same bound function
    assert structural_equal(fresh.func, cand.sch.func)
    ins = inputs(tensors, seed=1)
    np.testing.assert_allclose(run(fresh.func, tensors, ins), ref(*ins), rtol=1e-4, atol=1e-4)


def _points(ctx, n, seed=0):
    spaces = [DesignSpace(s.trace) for s in ctx.generate_design_space()]
    rand = random.Random(seed)
    out = []
    while len(out) < n:
        p = finish_point(replay(rand.choice(spaces), ctx.func, rand.randrange(1 << 30)),
                         ctx.postprocs)
        if p.candidate is not None:
            out.append(p)
    return out


@pytest.mark.parametrize("name", ["relu", "softmax"])
def test_mutate_thread_binding_picks_another_thread_count_that_replays(name):
    ctx, tensors, ref = context(name)
    mutator = Mutator.create("thread-binding")
    rand = random.Random(0)
    ins = inputs(tensors)
    changed = 0
    for parent in _points(ctx, 4):
        positions = mutator.positions(parent)
        if not positions:
            continue  # softmax's space without cross-thread reduction
        pos, new = mutator.apply(parent, rand)
        assert pos in positions and new != parent.decisions[pos]
        child = finish_point(replay(parent.space, ctx.func, 1, base=parent, start=pos,
                                    decisions={**parent.decisions, pos: new}), ctx.postprocs)
        assert child.decisions[pos] == new
        assert {p: d for p, d in child.decisions.items() if p != pos} == \
            {p: d for p, d in parent.decisions.items() if p != pos}
        extents = {lp.extent for lp in bound_loops(child.sch.func, "threadIdx")}
        assert parent.space.insts[pos].attrs[0][new] in extents
        np.testing.assert_allclose(run(child.candidate.sch.func, tensors, ins), ref(*ins),
                                   rtol=1e-4, atol=1e-4)
        changed += 1
    assert changed >= 2


def test_mutate_thread_binding_leaves_other_categorical_samples_alone():
    ctx, _, _ = context("matmul")  # thread counts from tile sizes; vector lengths, unroll
    (point,) = _points(ctx, 1)
    assert Mutator.create("thread-binding").positions(point) == []
    assert "categorical" in point.space.tags.values()


# ------------------------------------------------------------------------------ verification
def _elementwise(n: int, threads: int) -> Schedule:
    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    sch = Schedule(te.create_prim_func([a, b]))
    (i,) = sch.get_loops(sch.get_block("B"))
    bx, tx = sch.split(i, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch


def test_verify_gpu_code_refuses_2048_threads_per_block_naming_the_limit():
    errors = gpu_code_errors(_elementwise(4096, 2048).func, TARGET)
    assert any("2048 threads per block" in e and "max_threads_per_block 1024" in e
               and "by 1024" in e for e in errors), errors
    assert gpu_code_errors(_elementwise(4096, 1024).func, TARGET) == []


def test_verify_gpu_code_refuses_too_much_shared_memory_naming_the_limit():
    func = te.create_prim_func(workload("matmul", M=32, N=32, K=4096)[0])
    sch = Schedule(func)
    b = sch.get_block("matmul")
    i, j, k = sch.get_loops(b)
    io, ii = sch.split(i, [None, 16])
    jo, ji = sch.split(j, [None, 16])
    sch.reorder(io, jo, ii, ji, k)
    bx = sch.fuse(io, jo)
    sch.bind(bx, "blockIdx.x")
    sch.bind(sch.fuse(ii, ji), "threadIdx.x")
    for index in (0, 1):  # whole 16 x 4096 panels of A and B: 512 KiB a block
        sch.compute_at(sch.cache_read(b, index, "shared"), bx)
    limit = TARGET.max_shared_memory_per_block_optin
    errors = gpu_code_errors(sch.func, TARGET)
    assert any(f"{2 * 16 * 4096 * 4} bytes of shared memory" in e
               and f"max_shared_memory_per_block_optin {limit}" in e
               and f"by {2 * 16 * 4096 * 4 - limit}" in e for e in errors), errors
    post = VerifyGPUCode()
    post.initialize_with_tune_context(TuneContext(func, target=TARGET, seed=0))
    assert not post.apply(sch)


def test_verify_gpu_code_names_an_unbound_block_and_a_register_hungry_thread():
    func = te.create_prim_func(workload("relu", **CASES["relu"])[0])
    (msg,) = gpu_code_errors(func, TARGET)
    assert "relu" in msg and "not bound to GPU threads" in msg and "auto-bind" in msg

    sch = Schedule(te.create_prim_func(workload("matmul", M=64, N=64, K=8)[0]))
    b = sch.get_block("matmul")
    i, j, k = sch.get_loops(b)
    sch.bind(sch.add_unit_loop(i), "threadIdx.x")  # one thread, a 64 x 64 accumulator
    sch.reverse_compute_at(sch.cache_write(b, 0, "local"), sch.get_loops(b)[0])
    errors = gpu_code_errors(sch.func, TARGET)
    assert any("4096 registers of local arrays per thread exceed the budget" in e
               for e in errors), errors


def test_verify_gpu_code_accepts_a_hand_written_shared_memory_matmul():
    from gpu_schedules import shared_matmul, softmax
    assert gpu_code_errors(shared_matmul().func, TARGET) == []
    assert gpu_code_errors(softmax().func, TARGET) == []


# ------------------------------------------------------------------------------ defaults
def test_the_cuda_target_picks_the_gpu_defaults():
    names = [n for n, _ in DEFAULT_RULES["cuda"]]
    assert names == ["auto-inline", "cross-thread-reduction", "multi-level-tiling",
                     "auto-bind", "parallel-vectorize-unroll"]
    assert [type(p).__name__ for p in default_postprocs(TARGET)] == [
        "RewriteCooperativeFetch", "RewriteUnboundBlock", "RewriteParallelVectorizeUnroll",
        "VerifyGPUCode"]
    assert "MutateThreadBinding" in {type(m).__name__ for m in default_mutators(TARGET)}
    # target="cuda" (as tune_tir gets it): a GPU design space, whatever GPU is (not) here
    ctx, tensors, _ = context("softmax", target="cuda")
    assert ctx.target.kind == "cuda"
    spaces = ctx.generate_design_space()
    assert spaces
    for space in spaces:
        cand = sample_from(space, ctx.func, 0, ctx.postprocs)
        assert cand is not None and not unbound_nests(cand.sch.func)


def test_tune_tir_searches_gpu_schedules_with_a_fake_builder_and_runner():
    from looptune.tune import (Builder, BuilderResult, MemoryDatabase, Runner, RunnerResult,
                               tune_tir)
    from looptune.tune.search_strategy.evolutionary import EvolutionarySearch

    class Fake(Builder, Runner):  # nothing is built or run: no GPU here
        def build(self, inputs):
            return [BuilderResult(artifact="", symbol="k", source_hash=str(i)) for i, _ in
                    enumerate(inputs)]

        def run(self, inputs):
            return [RunnerResult(run_secs=(1e-3,) * 3) for _ in inputs]

    func = te.create_prim_func(workload("matmul", M=32, N=32, K=16)[0])
    db = MemoryDatabase()
    tune_tir(func, TARGET, database=db, max_trials_global=8, num_trials_per_iter=8, seed=0,
             strategy=EvolutionarySearch(population_size=16, init_min_unmeasured=8,
                                         genetic_num_iters=1, max_search_share=None),
             builder=Fake(), runner=Fake(), check_correctness=False, progress=False)
    records = db.get_all_tuning_records()
    assert len(records) == 8
    for r in records:
        sch = Schedule(func)
        r.trace.apply_to_schedule(sch)
        assert bound_loops(sch.func, "threadIdx") and not unbound_nests(sch.func)


# ------------------------------------------------------------------------------ the CPU path
CPU = Target(kind="cpu", arch="x86_64", features=("avx2", "fma"), cores=2, vector_bits=256)
# sha256 (first 16 hex digits) of the CPU design-space traces as JSON: GPU options of
# MultiLevelTiling must leave them be; a change here changes every CPU tuning run (the last:
# reduction tiles up to 256, max_innermost_reduction)
CPU_SPACES = {"matmul": "2d6cc7ce9b879342", "conv2d": "c5bfa79584db0cfe",
              "softmax": "96c310796be2582f", "dense": "c948d57520b80904"}


@pytest.mark.parametrize("name", sorted(CPU_SPACES))
def test_cpu_design_spaces_are_unchanged(name):
    from workloads_small import SMALL
    tensors, _, _ = workload(name, **SMALL[name])
    ctx = TuneContext(te.create_prim_func(tensors), target=CPU, seed=3)
    traces = [s.trace.to_json() for s in ctx.generate_design_space()]
    text = json.dumps(traces, sort_keys=True, default=str)
    assert not any(i.kind.name == "Bind" for s in ctx.generate_design_space()
                   for i in s.trace.insts)
    assert hashlib.sha256(text.encode()).hexdigest()[:16] == CPU_SPACES[name], (
        "the CPU design space changed; if that is meant, update CPU_SPACES")


def test_large_matmul_samples_mostly_fit_the_gpu():
    """4096^3 on sm_90: every tile level is drawn within the launch's limits (virtual
    threads, threads, registers per axis), so most samples pass verify-gpu-code; scattering
    the twelve factors of two over five levels passed none of 200."""
    tensors, _, _ = workload("matmul", M=4096, N=4096, K=4096)
    ctx = TuneContext(te.create_prim_func(tensors), target=cuda_target("sm_90"), seed=0)
    (space,) = ctx.generate_design_space()
    valid = sum(sample_from(space, ctx.func, seed, ctx.postprocs) is not None
                for seed in range(40))
    assert valid >= 16
    tiles = [i for i in space.trace.insts if i.kind.name == "SamplePerfectTile"]
    assert [list(i.attrs[2]) for i in tiles[:1]] == [[None, 2, 32, 8, 8]]
