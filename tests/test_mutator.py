"""Mutators change decisions only, keep schedules valid and correct, and replay from a
snapshot gives the same schedule as a replay from scratch; users can register their own."""
from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from looptune import te
from looptune.codegen import lower
from looptune.schedule import Schedule
from looptune.schedule.primitives.sampling import check_partitioned_tile, tile_inner_choices
from looptune.te.ops import workload
from looptune.tir import interpreter
from looptune.tune import TuneContext
from looptune.tune.defaults import default_mutators
from looptune.tune.mutator import Mutator
from looptune.tune.search_strategy.space import DesignSpace, finish_point, replay


def setup(name, **shape):
    tensors, ref, _ = workload(name, **shape)
    func = te.create_prim_func(tensors)
    ctx = TuneContext(func, seed=0)
    spaces = [DesignSpace(s.trace) for s in ctx.generate_design_space()]
    return ctx, func, spaces, tensors, ref


def points(ctx, func, spaces, n, seed=0):
    rand = random.Random(seed)
    out = []
    while len(out) < n:
        p = finish_point(replay(rand.choice(spaces), func, rand.randrange(1 << 30)), ctx.postprocs)
        if p.candidate is not None:
            out.append(p)
    return out


def mutants(ctx, func, parents, n, seed=0, mutators=None):
    rand = random.Random(seed)
    muts = mutators or default_mutators(ctx.target)
    out, used = [], Counter()
    for _ in range(20 * n):
        if len(out) >= n:
            break
        parent = rand.choice(parents)
        m = rand.choices(list(muts), weights=list(muts.values()))[0]
        prop = m.apply(parent, rand)
        if prop is None:
            continue
        pos, decision = prop
        try:
            child = replay(parent.space, func, rand.randrange(1 << 30),
                           decisions={**parent.decisions, pos: decision}, base=parent, start=pos)
        except Exception as e:  # noqa: BLE001 - only ScheduleError is acceptable
            from looptune.schedule import ScheduleError
            assert isinstance(e, ScheduleError), e
            continue
        finish_point(child, ctx.postprocs)
        if child.candidate is None:
            continue
        out.append((parent, pos, child))
        used[type(m).__name__] += 1
    return out, used


def run(sch_func, tensors, ins):
    out = np.full(tensors[-1].shape, np.nan, "float32")
    interpreter.run(lower(sch_func, vectorize=False), *ins, out)
    return out


@pytest.mark.parametrize("name,shape", [("matmul_add", dict(M=12, N=20, K=8)),
                                        ("conv2d", dict(C=4, H=8, W=8, K=8)),
                                        ("softmax", dict(M=6, N=10))])
def test_mutants_change_one_decision_and_compute_the_same(name, shape):
    ctx, func, spaces, tensors, ref = setup(name, **shape)
    parents = points(ctx, func, spaces, 6)
    kids, used = mutants(ctx, func, parents, 12)
    assert len(kids) >= 8
    rng = np.random.default_rng(0)
    ins = [rng.uniform(-1, 1, t.shape).astype("float32") for t in tensors[:-1]]
    want = ref(*ins)
    for parent, pos, child in kids:
        # instructions are the parent's; only the decision at `pos` (and what it implies for
        # later samples' replays) may differ
        assert [i.kind.name for i in child.sch.trace.insts] == \
            [i.kind.name for i in parent.sch.trace.insts]
        assert child.decisions[pos] != parent.decisions[pos]
        assert {p: d for p, d in child.decisions.items() if p < pos} == \
            {p: d for p, d in parent.decisions.items() if p < pos}
        np.testing.assert_allclose(run(child.candidate.sch.func, tensors, ins), want,
                                   rtol=1e-4, atol=1e-4)


def test_replay_from_a_snapshot_equals_replay_from_scratch():
    ctx, func, spaces, *_ = setup("conv2d", C=4, H=8, W=8, K=8)
    parents = points(ctx, func, spaces, 4, seed=3)
    kids, used = mutants(ctx, func, parents, 6, seed=3)
    assert len(kids) == 6 and len(used) >= 2, used  # several mutators, each from a snapshot
    for _, pos, child in kids:
        assert pos > 0  # a replay that starts after the first instruction: a real snapshot
        scratch = replay(child.space, func, 0, decisions=child.decisions)
        assert scratch.decisions == child.decisions
        assert scratch.sch.func.structural_hash() == child.sch.func.structural_hash()
        # and the trace of the mutant replays on a fresh schedule to the same function
        fresh = Schedule(func)
        child.candidate.sch.trace.apply_to_schedule(fresh)
        assert fresh.func.structural_hash() == child.candidate.sch.func.structural_hash()


def test_every_default_mutator_finds_work_on_conv2d():
    ctx, func, spaces, *_ = setup("conv2d", C=4, H=8, W=8, K=8)
    parents = points(ctx, func, spaces, 6)
    muts = {m: 1.0 for m in default_mutators(ctx.target)}
    _, used = mutants(ctx, func, parents, 40, mutators=muts)
    assert set(used) == {"MutateTileSize", "MutateComputeLocation", "MutateUnroll",
                         "MutateParallel"}


def test_a_custom_mutator_takes_effect():
    @Mutator.registry.register("test-unroll-to-max")
    class UnrollToMax(Mutator):
        tag = "unroll"

        def apply(self, point, rand):
            pos = self.positions(point)[0]
            last = point.info[pos] - 1
            return None if point.decisions[pos] == last else (pos, last)

    ctx, func, spaces, *_ = setup("matmul", M=16, N=16, K=16)
    parents = [p for p in points(ctx, func, spaces, 8) if p.decisions[max(
        q for q, t in p.space.tags.items() if t == "unroll")] != 3]
    kids, used = mutants(ctx, func, parents, 4, mutators={Mutator.create("test-unroll-to-max"): 1})
    assert used == {"UnrollToMax": 4}
    for _, pos, child in kids:
        assert child.decisions[pos] == 3
        root = child.sch.get(child.sch.get_block("root"))
        assert dict(root.annotations)["pragma_auto_unroll_max_step"] == 512


def test_sample_tile_may_over_cover_and_stays_correct():
    assert 6 in tile_inner_choices(1024, 64) and 37 not in tile_inner_choices(1024, 64)
    # the divisors, and 3, 5, 6, 7 (at most 8, padded by at most 10%)
    assert tile_inner_choices(64, 16) == (1, 2, 3, 4, 5, 6, 7, 8, 16)
    # a 56-wide image gets whole 16-lane vectors (3 and a tail of 8), not 48 (one, 86% waste)
    assert 16 in tile_inner_choices(56, 64) and 48 not in tile_inner_choices(56, 64)
    assert check_partitioned_tile((19, 9, 6), 1024, 3)
    assert not check_partitioned_tile((19, 9, 7), 1024, 3)
    A = te.placeholder((50, 8), name="A")
    B = te.compute((50, 8), lambda i, j: A[i, j] * 2.0, name="B")
    func = te.create_prim_func([A, B])
    a = np.random.default_rng(0).uniform(-1, 1, (50, 8)).astype("float32")
    for inner in (6, 7, 16):
        sch = Schedule(func)
        i, _ = sch.get_loops(sch.get_block("B"))
        outer = -(-50 // inner)
        tiles = sch.sample_tile(i, n=2, max_innermost_factor=16, decision=(outer, inner))
        sch.split(i, tiles)
        out = np.full((50, 8), np.nan, "float32")
        interpreter.run(lower(sch.func, vectorize=False), a, out)
        np.testing.assert_allclose(out, a * 2)


# ------------------------------------------------------------------------------ capped tiles
def test_capped_tiles_divide_the_extent_within_every_limit():
    from looptune.schedule.primitives.sampling import sample_capped_tile
    rand = random.Random(0)
    caps = (None, 2, 32, 8, 8)
    seen = set()
    for _ in range(300):
        t = sample_capped_tile(rand, 4096, 5, caps)
        assert np.prod(t) == 4096 and all(c is None or f <= c for f, c in zip(t, caps)), t
        seen.add(t[1:])
    assert len(seen) > 50  # the limited levels take every allowed size, not only the largest
    assert {t[0] for t in seen} == {1, 2} and {t[-1] for t in seen} == {1, 2, 4, 8}


def test_a_capped_tile_round_trips_through_json_and_old_traces_still_load():
    from looptune.schedule import Trace
    func, _, _ = _matmul_func()
    sch = Schedule(func, seed=3)
    i, _, _ = sch.get_loops(sch.get_block("matmul"))
    tiles = sch.sample_perfect_tile(i, n=3, max_factors=[None, 2, 4])
    sch.split(i, tiles)
    text = sch.trace.to_json()
    again = Schedule(func, seed=3)
    Trace.from_json(text).apply_to_schedule(again)
    assert again.trace.to_json() == text
    (inst,) = [x for x in sch.trace.insts if x.kind.name == "SamplePerfectTile"]
    assert list(inst.attrs[2]) == [None, 2, 4]
    old = Schedule(func, seed=3)  # a trace written before max_factors existed: two attrs
    j, _, _ = old.get_loops(old.get_block("matmul"))
    old.split(j, old.sample_perfect_tile(j, n=2, max_innermost_factor=4))
    assert len([x for x in old.trace.insts if x.kind.name == "SamplePerfectTile"][0].attrs) == 2
    Trace.from_json(old.trace.to_json()).apply_to_schedule(Schedule(func, seed=3))
    with pytest.raises(Exception, match="one limit"):
        sch2 = Schedule(func)
        sch2.sample_perfect_tile(sch2.get_loops(sch2.get_block("matmul"))[0], n=3,
                                 max_factors=[None, 2])


def _matmul_func():
    tensors, ref, _ = workload("matmul", M=64, N=64, K=16)
    return te.create_prim_func(tensors), tensors, ref


def test_tile_mutations_keep_every_level_within_its_limit():
    from looptune.target import cuda_target
    from looptune.schedule.primitives.sampling import tile_caps
    tensors, _, _ = workload("matmul", M=1024, N=1024, K=256)
    func = te.create_prim_func(tensors)
    ctx = TuneContext(func, target=cuda_target("sm_80"), seed=0)
    spaces = [DesignSpace(s.trace) for s in ctx.generate_design_space()]
    parents = points(ctx, func, spaces, 4)
    tile = {k: m for k, m in default_mutators(ctx.target).items()
            if type(k).__name__ == "MutateTileSize"}
    children, _ = mutants(ctx, func, parents, 12, mutators=tile)
    assert children
    for parent, pos, child in children:
        caps = tile_caps(parent.space.insts[pos].attrs)
        assert caps is not None
        decision = child.decisions[pos]
        assert all(c is None or f <= c for f, c in zip(decision, caps)), (decision, caps)
