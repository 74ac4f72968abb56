"""Traces: printing, JSON round-trip, as_python re-execution, replay determinism,
with_decision, and replay refusals."""
from __future__ import annotations

import json

import pytest

from looptune import te
from looptune.schedule import Schedule, ScheduleError, Trace
from looptune.tir import structural_equal
from looptune.testing import random_block_schedule, random_schedule
from workloads_small import all_names, small_workload


def matmul(n=64, m=48, k=32, names=("A", "B", "C")):
    A = te.placeholder((n, k), name=names[0])
    B = te.placeholder((k, m), name=names[1])
    r = te.reduce_axis(k, "k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return te.create_prim_func([A, B, C])


def tiled(func, seed=0):
    sch = Schedule(func, seed=seed)
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    ti = sch.sample_perfect_tile(i, n=3, max_innermost_factor=8)
    i0, i1, i2 = sch.split(i, ti)
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(k, [None, 5])
    sch.reorder(i0, j0, k0, i1, k1, i2, j1)
    f = sch.fuse(i0, j0)
    sch.parallel(f)
    sch.vectorize(j1)
    step = sch.sample_categorical([0, 16, 64], [0.2, 0.5, 0.3])
    sch.annotate(b, "pragma_auto_unroll_max_step", step)
    sch.annotate(b, "note", "hand written")
    sch.unroll(k1)
    return sch


def test_trace_prints_instructions_with_names():
    sch = tiled(matmul())
    text = str(sch.trace)
    assert "b0 = GetBlock(name='C')" in text
    assert "l1, l2, l3 = GetLoops(block=b0)" in text
    assert "Split(loop=l2, factors=[None, 16])" in text
    assert "SamplePerfectTile(loop=l1, n=3, max_innermost_factor=8, decision=[" in text
    assert "Reorder(loops=[" in text


def test_json_round_trip_is_exact():
    sch = tiled(matmul())
    j1 = sch.trace.to_json()
    text = json.dumps(j1)
    t2 = Trace.from_json(json.loads(text))
    assert t2.to_json() == j1
    assert json.dumps(t2.to_json()) == text
    assert str(t2) == str(sch.trace)


@pytest.mark.parametrize("name", all_names())
def test_json_round_trip_and_replay_random(name):
    func, *_ = small_workload(name)
    for seed in range(6):
        sch = (random_schedule if seed < 3 else random_block_schedule)(func, seed)
        t = Trace.from_json(json.loads(json.dumps(sch.trace.to_json())))
        fresh = Schedule(func, seed=999)
        t.apply_to_schedule(fresh)
        assert structural_equal(fresh.func, sch.func), f"{name} seed {seed}"
        assert t.to_json() == sch.trace.to_json()


def test_as_python_reproduces_the_schedule():
    func = matmul()
    sch = tiled(func)
    code = sch.trace.as_python()
    assert code.splitlines()[0] == "b0 = sch.get_block(name='C')"
    assert "sch.fuse(" in code and "sch.reorder(l" in code
    fresh = Schedule(func, seed=12345)
    exec(code, {"sch": fresh})
    assert structural_equal(fresh.func, sch.func)
    assert str(fresh.trace) == str(sch.trace)


def test_replay_is_deterministic_and_name_blind():
    sch = tiled(matmul(), seed=7)
    other = matmul(names=("X", "Y", "Z"))  # same computation, other names
    a, b = Schedule(other, seed=1), Schedule(other, seed=2)
    sch.trace.apply_to_schedule(a)
    sch.trace.apply_to_schedule(b)
    assert structural_equal(a.func, b.func)
    assert structural_equal(a.func, sch.func)


def test_replay_without_decisions_resamples_with_the_seed():
    func = matmul()
    sch = tiled(func)
    bare = Trace(sch.trace.insts, {})
    s1, s2, s3 = Schedule(func, seed=5), Schedule(func, seed=5), Schedule(func, seed=6)
    for s in (s1, s2, s3):
        bare.apply_to_schedule(s)
    assert structural_equal(s1.func, s2.func)
    decisions = [tuple(s.trace.decisions.values()) for s in (s1, s2, s3)]
    assert decisions[0] == decisions[1]
    assert decisions[2] != decisions[0]  # another seed samples other tiles
    assert not structural_equal(s3.func, s1.func)


def test_with_decision_changes_the_replayed_schedule():
    func = matmul()
    sch = tiled(func)
    tile = next(i for i in sch.trace.insts if i.kind.name == "SamplePerfectTile")
    old = sch.trace.decisions[tile]
    choice = (2, 4, 8) if old != (2, 4, 8) else (8, 4, 2)
    new = sch.trace.with_decision(tile, choice)
    fresh = Schedule(func)
    new.apply_to_schedule(fresh)
    loops = [lp.extent for lp in fresh.enclosing_loops("C")]
    assert loops[0] == choice[0] * 3  # i0 fused with j0 (48 / 16 = 3)
    assert choice[1] in loops and choice[2] in loops
    assert fresh.trace.decisions[fresh.trace.insts[2]] == choice
    assert sch.trace.decisions[tile] == old  # the original trace is untouched


def test_with_decision_refuses_a_bad_decision_on_replay():
    func = matmul()
    sch = tiled(func)
    tile = next(i for i in sch.trace.insts if i.kind.name == "SamplePerfectTile")
    bad = sch.trace.with_decision(tile, (5, 5, 5))
    with pytest.raises(ScheduleError, match="not 3 positive factors"):
        bad.apply_to_schedule(Schedule(func))


def test_replay_on_another_workload_names_the_missing_block():
    sch = tiled(matmul())
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(ScheduleError, match="no block named 'C'"):
        sch.trace.apply_to_schedule(Schedule(te.create_prim_func([A, B])))


def test_simplified_drops_dead_lookups():
    func = matmul()
    sch = Schedule(func)
    b = sch.get_block("C")
    sch.get_loops(b)
    sch.get_loops(b)
    i, j, k = sch.get_loops(b)
    sch.split(i, [None, 4])
    simple = sch.trace.simplified()
    assert [x.kind.name for x in simple.insts] == ["GetBlock", "GetLoops", "Split"]
    fresh = Schedule(func)
    simple.apply_to_schedule(fresh)
    assert structural_equal(fresh.func, sch.func)


def test_from_json_rejects_garbage():
    with pytest.raises(ScheduleError, match="format version"):
        Trace.from_json({"insts": []})
    with pytest.raises(ScheduleError, match="unknown instruction kind"):
        Trace.from_json({"version": 2, "insts": [["Frobnicate", [], [], []]], "decisions": []})
