"""Schedule's public queries (block_names, has_block, realize, parents, enclosing_loops,
exists, compute_locations), checkpoint / rewind, and apply_instruction: what rules,
postprocessors and search use instead of a schedule's internals (pure Python)."""
from __future__ import annotations

import pytest

from looptune import te
from looptune.schedule import BlockRV, LoopRV, Schedule, ScheduleError
from looptune.schedule.trace import map_rvs
from looptune.tir import BlockRealize, For, collect_vars, structural_equal


def matmul_relu(n=16, m=12, k=8):
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis(k, "k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    D = te.compute((n, m), lambda i, j: te.max(C[i, j], 0.0), name="D")
    return te.create_prim_func([A, B, D])


def add_mul(n=16):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((n,), lambda i: B[i] * 2.0, name="C")
    return te.create_prim_func([A, C])


def test_queries_record_nothing():
    sch = Schedule(matmul_relu())
    b = sch.get_block("C")
    loops = sch.get_loops(b)
    before = sch.trace.to_json()
    sch.block_names(), sch.has_block("C"), sch.realize(b), sch.realize("D")
    sch.parents(b), sch.parents(loops[0]), sch.enclosing_loops(b), sch.exists(loops[0])
    sch.compute_locations(b)
    assert sch.trace.to_json() == before


def test_block_names_and_has_block():
    assert Schedule(matmul_relu()).block_names() == ["root", "C", "D"]
    sch = Schedule(add_mul())
    assert sch.has_block("B") and not sch.has_block("E")
    sch.compute_inline(sch.get_block("B"))
    assert sch.block_names() == ["root", "C"] and not sch.has_block("B")


def test_enclosing_loops_realize_and_parents():
    sch = Schedule(matmul_relu())
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    i0, i1 = sch.split(i, [None, 4])
    want = [sch.get(lp) for lp in sch.get_loops(b)]
    assert sch.enclosing_loops(b) == want == sch.enclosing_loops("C")
    assert [lp.extent for lp in want] == [4, 4, 12, 8]
    br = sch.realize(b)
    assert isinstance(br, BlockRealize) and br.block is sch.get(b) and br is sch.realize("C")
    # C's iteration variable i is bound to i0 * 4 + i1
    assert collect_vars(br.iter_values[0]) == {want[0].loop_var, want[1].loop_var}
    # a loop's parents: the root block's realize and block, then the loops around it
    parents = sch.parents(i1)
    assert parents[0] is sch.realize("root") and parents[1] is sch.get(sch.get_block("root"))
    assert [p for p in parents if isinstance(p, For)] == [sch.get(i0)]
    assert sch.parents(b)[-1] is sch.get(k)  # a block's innermost parent: its loop


def test_queries_refuse_what_does_not_exist():
    sch = Schedule(matmul_relu())
    with pytest.raises(ScheduleError, match="no block named 'E'; blocks are: C, D, root"):
        sch.enclosing_loops("E")
    with pytest.raises(ScheduleError, match="not a block of this schedule"):
        sch.realize(BlockRV())
    i = sch.get_loops(sch.get_block("C"))[0]
    sch.split(i, [None, 4])
    with pytest.raises(ScheduleError, match="no longer exists"):
        sch.parents(i)


def test_exists_follows_the_schedule():
    sch = Schedule(matmul_relu())
    c, d = sch.get_block("C"), sch.get_block("D")
    i = sch.get_loops(c)[0]
    assert sch.exists(c) and sch.exists(d) and sch.exists(i)
    i0, i1 = sch.split(i, [None, 4])
    assert not sch.exists(i) and sch.exists(i0) and sch.exists(i1)
    other = Schedule(add_mul())
    b = other.get_block("B")
    other.compute_inline(b)
    assert not other.exists(b)
    assert not sch.exists(LoopRV()) and not sch.exists(BlockRV())
    v = sch.sample_categorical([1, 2])
    assert sch.exists(v)
    with pytest.raises(TypeError):
        sch.exists("C")


def test_compute_locations_are_the_sampled_decisions():
    sch = Schedule(matmul_relu())
    c = sch.get_block("C")
    # D is C's only consumer: C may go under any of D's two loops
    assert sch.compute_locations(c) == sch.enclosing_loops("D") == sch.compute_locations("C")
    assert sch.compute_locations("D") == []  # no consumer
    for decision in range(len(sch.compute_locations(c))):
        trial = sch.copy()
        trial.compute_at(c, trial.sample_compute_location(c, decision=decision))
        assert len(trial.enclosing_loops("C")) >= decision + 1


def _tile(sch, b):
    i, j, k = sch.get_loops(b)
    sch.split(i, sch.sample_perfect_tile(i, n=2, max_innermost_factor=4))
    sch.split(j, sch.sample_perfect_tile(j, n=2, max_innermost_factor=4))


def test_rewind_returns_to_a_checkpoint():
    sch = Schedule(matmul_relu(), seed=3)
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    cp = sch.checkpoint()
    sch.split(i, sch.sample_perfect_tile(i, n=2, max_innermost_factor=4))
    sch.split(j, sch.sample_perfect_tile(j, n=2, max_innermost_factor=4))
    done, trace = sch.func, sch.trace.to_json()

    back = sch.rewind(cp)
    assert back.func is cp.func and len(back.trace) == cp.length == 2
    assert back.trace.insts == sch.trace.insts[:2]
    assert sch.func is done and sch.trace.to_json() == trace  # left as it was
    # without a seed, sampling goes on as it did: the same samples, the same schedule
    back.split(i, back.sample_perfect_tile(i, n=2, max_innermost_factor=4))
    back.split(j, back.sample_perfect_tile(j, n=2, max_innermost_factor=4))
    assert structural_equal(back.func, done) and back.trace.to_json() == trace
    # with a seed, sampling is reseeded (as Schedule.copy(seed=...) does)
    again = sch.rewind(cp, seed=11)
    assert again.seed == 11 and again.rand.getstate() == Schedule(sch.original, seed=11
                                                                  ).rand.getstate()


def test_rewind_keeps_decisions_and_refuses_a_foreign_checkpoint():
    sch = Schedule(matmul_relu(), seed=1)
    _tile(sch, sch.get_block("C"))
    cp = sch.checkpoint()
    sch.parallel(sch.get_loops(sch.get_block("C"))[0])
    back = sch.rewind(cp)
    assert back.trace.decisions == sch.trace.without_postproc().decisions
    assert back.rewind(cp).trace.to_json() == back.trace.to_json()  # from a rewound one too
    other = Schedule(matmul_relu(), seed=1)
    _tile(other, other.get_block("C"))
    with pytest.raises(ValueError, match="not taken on this schedule"):
        other.rewind(cp)
    with pytest.raises(ValueError, match="not taken on this schedule"):
        Schedule(sch.original).rewind(cp)


def test_apply_instruction_is_what_methods_and_replay_do():
    func = matmul_relu()
    sch = Schedule(func, seed=5)
    _tile(sch, sch.get_block("C"))
    sch.reverse_compute_at(sch.get_block("D"), sch.get_loops(sch.get_block("C"))[1])
    by_hand = Schedule(func, seed=5)
    rv_map = {}
    for inst in sch.trace.insts:
        inputs = tuple(map_rvs(x, rv_map) for x in inst.inputs)
        outs = by_hand.apply_instruction(inst.kind, inputs, inst.attrs,
                                         sch.trace.decisions.get(inst))
        rv_map.update(zip(inst.outputs, outs))
    assert structural_equal(by_hand.func, sch.func)
    assert by_hand.trace.to_json() == sch.trace.to_json()
    # by name, too; a refusal leaves the schedule unchanged
    (c,) = by_hand.apply_instruction("GetBlock", [], ["C"])
    before = by_hand.func
    with pytest.raises(ScheduleError):
        by_hand.apply_instruction("Vectorize", [by_hand.get_loops(c)[-1]], [])  # reduction
    assert by_hand.func is before
