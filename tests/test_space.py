"""Design spaces from the schedule rules: the expected sketch structure for matmul, conv2d,
dense, softmax, layer_norm and a row sum; every sampled schedule is correct; users can plug in
their own rules and postprocessors."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from looptune import te
from looptune.codegen import lower
from looptune.schedule import ScheduleError
from looptune.te.ops import workload
from looptune.tir import interpreter
from looptune.tune import Postproc, ScheduleRule, TuneContext, TuneError
from looptune.tune.search_strategy.replay_trace import sample_from
from looptune.tune.space_generator import PostOrderApply


def context(name, seed=0, **shape):
    tensors, ref, _ = workload(name, **shape)
    return TuneContext(te.create_prim_func(tensors), seed=seed), tensors, ref


def kinds(sch) -> Counter:
    return Counter(i.kind.name for i in sch.trace.insts)


def tile_ns(sch) -> list:
    return [i.attrs[0] for i in sch.trace.insts
            if i.kind.name in ("SamplePerfectTile", "SampleTile")]


def check_samples(ctx, tensors, ref, n=6):
    rng = np.random.default_rng(1)
    ins = [rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in tensors[:-1]]
    want = ref(*ins)
    spaces = ctx.generate_design_space()
    got_any = 0
    for s in range(n):
        cand = sample_from(spaces[s % len(spaces)], ctx.func, s, ctx.postprocs)
        if cand is None:
            continue
        got_any += 1
        out = np.full(tensors[-1].shape, np.nan, "float32")
        interpreter.run(lower(cand.sch.func, vectorize=False), *ins, out)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, err_msg=str(cand.sch.trace))
    assert got_any >= n // 2


def test_matmul_space_is_ssrsrs_tiling_with_a_local_accumulator():
    ctx, tensors, ref = context("matmul", M=16, N=24, K=12)
    spaces = ctx.generate_design_space()
    # write-back at tiling level 1 or 2, each without copies and with B (loaded as vectors;
    # A is broadcast) copied per outer reduction tile into a packed panel (read_levels
    # (None, 1), read_operands ("vector",))
    assert len(spaces) == 4
    assert sorted(kinds(s)["CacheRead"] for s in spaces) == [0, 0, 1, 1]
    for sch in spaces:
        k = kinds(sch)
        assert tile_ns(sch) == [4, 4, 2]
        assert k["Split"] == 3 and k["Reorder"] == 1
        assert k["CacheWrite"] == 1 and k["ReverseComputeAt"] == 1
        assert k["ComputeAt"] == k["CacheRead"]  # each copy at its reduction tile
        assert k["SampleTile"] == 2 and k["SamplePerfectTile"] == 1  # spatial may over-cover
        assert k["SampleCategorical"] == 2  # the parallel extent and the unroll depth
        root_ann = dict(sch.get(sch.get_block("root")).annotations)
        assert root_ann["meta_schedule.parallel"] in [j * ctx.target.cores for j in (1, 4, 16, 64)]
    levels = {sch.trace.insts[[i.kind.name for i in sch.trace.insts].index("ReverseComputeAt")]
              .inputs[1] for sch in spaces}
    assert len(levels) == 2
    check_samples(ctx, tensors, ref)


def test_reduction_tiles_may_be_longer_than_four_vectors():
    """The innermost reduction tile is the number of steps between two loads and stores of
    the register tile: it may reach 256 (the default rules), where the spatial tiles stay
    within four vectors of the target's float32 lanes (32 with AVX2, 64 with AVX-512)."""
    ctx, tensors, ref = context("matmul", M=64, N=64, K=1024)
    lanes = ctx.target.vector_lanes_f32
    spaces = ctx.generate_design_space()
    for sch in spaces:
        limits = {i.kind.name: i.attrs[1] for i in sch.trace.insts
                  if i.kind.name in ("SamplePerfectTile", "SampleTile")}
        assert limits == {"SampleTile": 4 * lanes, "SamplePerfectTile": 256}
    seen = set()
    for seed in range(64):
        point = sample_from(spaces[0], ctx.func, seed, ctx.postprocs)
        if point is not None:
            inst = [i for i in point.sch.trace.insts if i.kind.name == "SamplePerfectTile"][0]
            seen.add(point.sch.trace.get_decision(inst)[-1])
    assert max(seen) > 4 * lanes, seen


def test_dense_fuses_the_epilogue_instead_of_caching():
    ctx, tensors, ref = context("dense", batch=4, in_features=20, out_features=24)
    spaces = ctx.generate_design_space()
    assert len(spaces) == 4  # the epilogue at tiling level 1 or 2; with or without copies
    for sch in spaces:
        k = kinds(sch)
        assert k["CacheWrite"] == 0 and k["ReverseComputeAt"] == 1
    check_samples(ctx, tensors, ref)


def test_conv2d_space_tiles_seven_loops_and_places_the_padding():
    ctx, tensors, ref = context("conv2d", C=4, H=8, W=8, K=12)  # K: no whole vector
    spaces = ctx.generate_design_space()
    assert len(spaces) == 4  # write-back at tiling level 1 or 2; with or without copies
    for sch in spaces:
        assert tile_ns(sch) == [4, 4, 4, 4, 2, 2, 2]
        k = kinds(sch)
        assert k["SampleComputeLocation"] == 1 and k["ComputeAt"] == 1 + k["CacheRead"]
        assert k["ComputeInline"] == 0  # padding has a condition: not inlined
    check_samples(ctx, tensors, ref)


def test_conv2d_space_offers_output_channel_vectors_with_packed_weight_panels():
    """A stride-2 conv reads x as 2x+s: two more spaces vectorize the output channels
    instead, each copying a weight panel per tile with k last and keeping the accumulators
    with k last (permute_layout); their samples compute the conv."""
    ctx, tensors, ref = context("conv2d", C=4, H=10, W=10, K=32, stride=2)
    spaces = ctx.generate_design_space()
    assert len(spaces) == 6
    channel = [s for s in spaces if kinds(s)["PermuteLayout"]]
    assert len(channel) == 2
    for sch in channel:
        k = kinds(sch)
        assert k["CacheRead"] == 1 and k["PermuteLayout"] == 2 and k["CacheWrite"] == 1
        block = sch.get(sch.get_block("conv2d_nchw"))
        weight = next(r.buffer for r in block.reads if r.buffer.name.startswith("W"))
        assert weight.shape == (4, 3, 3, 32)  # [C][R][S][K]
        assert block.writes[0].buffer.shape[-1] == 32  # accumulators: [N][Y][X][K]
    check_samples(ctx, tensors, ref, n=8)
    # a matmul reads its columns contiguously: no such spaces
    assert len(context("matmul", M=32, N=24, K=12)[0].generate_design_space()) == 4


@pytest.mark.parametrize("name,shape", [("softmax", dict(M=6, N=10)),
                                        ("layer_norm", dict(M=5, N=12))])
def test_row_stages_get_compute_locations(name, shape):
    ctx, tensors, ref = context(name, **shape)
    spaces = ctx.generate_design_space()
    assert spaces
    for sch in spaces:
        k = kinds(sch)
        assert "'SSRSRS'" not in str(sch.trace)  # no data reuse: no multi-level tiling
        # both row stages before the last (max and sum, mean and variance) get one
        assert k["SampleComputeLocation"] == 2 and k["ComputeAt"] == 2
    check_samples(ctx, tensors, ref)


def test_small_reductions_get_rfactor_variants():
    ctx, tensors, ref = context("reduce_sum", M=2, N=64)
    spaces = ctx.generate_design_space()
    assert len(spaces) == 3
    assert sum(kinds(s)["RFactor"] for s in spaces) == 2
    check_samples(ctx, tensors, ref)


def test_a_custom_rule_changes_the_space():
    @ScheduleRule.registry.register("test-split-every-loop-in-two")
    class SplitInTwo(ScheduleRule):
        def apply(self, sch, block):
            if sch.get(block).name == "root":
                return [sch]
            out = [sch]
            s2 = sch.copy()
            for loop in s2.get_loops(block):
                try:
                    s2.split(loop, [None, 2])
                except ScheduleError:
                    pass
            out.append(s2)
            return out

    tensors, _, _ = workload("relu", N=1, C=2, H=4, W=6)
    func = te.create_prim_func(tensors)
    base = TuneContext(func, seed=0).generate_design_space()
    ctx = TuneContext(func, seed=0, space_generator=PostOrderApply(
        sch_rules=["auto-inline", "test-split-every-loop-in-two", "parallel-vectorize-unroll"]))
    spaces = ctx.generate_design_space()
    assert len(spaces) == 2 * len(base)
    assert any(kinds(s)["Split"] == 4 for s in spaces)


@pytest.mark.parametrize("returned", [None, []])
def test_a_custom_rule_that_returns_nothing_is_named(returned):
    @ScheduleRule.registry.register(f"test-returns-{returned!r}")
    class ReturnsNothing(ScheduleRule):
        def apply(self, sch, block):
            return returned if sch.get(block).name == "root" else [sch]

    func = te.create_prim_func(workload("relu", N=1, C=2, H=4, W=6)[0])
    ctx = TuneContext(func, seed=0, space_generator=PostOrderApply(
        sch_rules=[f"test-returns-{returned!r}"]))
    with pytest.raises(TuneError, match=r"ReturnsNothing returned .* for block 'root'.*\[sch\]"):
        ctx.generate_design_space()


def test_a_custom_postproc_can_reject_everything():
    @Postproc.registry.register("test-reject-all")
    class RejectAll(Postproc):
        def apply(self, sch):
            return False

    tensors, _, _ = workload("relu", N=1, C=2, H=4, W=6)
    ctx = TuneContext(te.create_prim_func(tensors), seed=0,
                      space_generator=PostOrderApply(postprocs=["test-reject-all"]))
    space = ctx.generate_design_space()[0]
    assert sample_from(space, ctx.func, 0, ctx.postprocs) is None
    # the refusal is the postprocessor's: without it, the same space gives a candidate
    plain = TuneContext(te.create_prim_func(tensors), seed=0)
    assert sample_from(plain.generate_design_space()[0], plain.func, 0, plain.postprocs)


def test_unknown_rule_names_are_clear_errors():
    with pytest.raises(ValueError, match="unknown schedule rule 'no-such-rule'; registered:"):
        TuneContext(te.create_prim_func(workload("relu")[0]),
                    space_generator=PostOrderApply(sch_rules=["no-such-rule"]))


def test_multi_level_tiling_read_caches():
    tensors, ref, _ = workload("matmul", M=16, N=24, K=12)
    from looptune.tune.schedule_rule import MultiLevelTiling
    rules = ["auto-inline", MultiLevelTiling(read_levels=(1,)), "parallel-vectorize-unroll"]
    ctx = TuneContext(te.create_prim_func(tensors), seed=0,
                      space_generator=PostOrderApply(sch_rules=rules))
    spaces = ctx.generate_design_space()
    assert len(spaces) == 2  # write-back at tiling level 1 or 2
    for sch in spaces:
        k = kinds(sch)
        assert k["CacheRead"] == 2 and k["ComputeAt"] == 2  # A and B copied per k tile
    check_samples(ctx, tensors, ref)


@pytest.mark.parametrize("name, shape, copied", [
    ("matmul", dict(M=16, N=24, K=12), {"B"}),     # A[i, k] is broadcast under j
    ("conv2d", dict(C=4, H=8, W=8, K=12), {"pad"}),  # W[k, c, ry, rx] is broadcast under x
])
def test_vector_read_copies_pack_only_what_is_loaded_as_vectors(name, shape, copied):
    """read_operands="vector": the per-tile copies are of the inputs the innermost spatial
    loop indexes; the others stay where they are (copying A per column tile of a matmul
    repeats the copy for every tile)."""
    tensors, ref, _ = workload(name, **shape)
    from looptune.tune.schedule_rule import MultiLevelTiling
    rules = ["auto-inline", MultiLevelTiling(read_levels=(1,), read_operands=("vector",)),
             "parallel-vectorize-unroll"]
    ctx = TuneContext(te.create_prim_func(tensors), seed=0,
                      space_generator=PostOrderApply(sch_rules=rules))
    spaces = ctx.generate_design_space()
    assert len(spaces) == 2  # write-back at tiling level 1 or 2
    for sch in spaces:
        reads = [i for i in sch.trace.insts if i.kind.name == "CacheRead"]
        assert len(reads) == 1
        block = sch.get(sch.get_block("matmul" if name == "matmul" else "conv2d_nchw"))
        kept = {"A"} if name == "matmul" else {"W"}
        assert {r.buffer.name for r in block.reads} == {f"{c}_global" for c in copied} | kept
    check_samples(ctx, tensors, ref)
    with pytest.raises(ValueError, match="read_operands"):
        MultiLevelTiling(read_operands=("some",))


@pytest.mark.parametrize("n, vectorized", [(256, 64), (96, 48), (64, 64), (257, None)])
def test_a_loop_longer_than_the_vector_limit_is_vectorized_in_parts(n, vectorized):
    """relu(x @ W + b) fuses its epilogue above the register tiles, over all 256 outputs:
    a loop that long is split by its largest divisor within the limit and the inner part
    vectorized (left whole, GCC unrolled it into scalar statements). Without a divisor of at
    least MIN_VECTOR_SPLIT (257 is prime) it stays as it was."""
    from looptune.schedule import Schedule
    from looptune.tune.postproc.rewrite_parallel_vectorize_unroll import (
        RewriteParallelVectorizeUnroll)
    from looptune.tune.schedule_rule.parallel_vectorize_unroll import VECTORIZE
    x = te.placeholder((n,), name="x")
    y = te.compute((n,), lambda i: te.max(x[i] * 2.0, 0.0), name="y")
    sch = Schedule(te.create_prim_func([x, y]))
    sch.annotate(sch.get_block("root"), VECTORIZE, 64)
    assert RewriteParallelVectorizeUnroll().apply(sch)
    loops = [sch.get(lp) for lp in sch.get_loops(sch.get_block("y"))]
    if vectorized is None:
        assert [(lp.extent, lp.kind) for lp in loops] == [(n, "serial")]
    else:
        assert (loops[-1].extent, loops[-1].kind) == (vectorized, "vectorized")
        assert [lp.extent for lp in loops] == ([vectorized] if n == vectorized
                                               else [n // vectorized, vectorized])
    xs = np.random.default_rng(0).uniform(-1, 1, n).astype("float32")
    out = np.full(n, np.nan, "float32")
    interpreter.run(lower(sch.func, vectorize=False), xs, out)
    np.testing.assert_allclose(out, np.maximum(xs * 2, 0), rtol=1e-6)
