"""GPU lowering (pure Python): kernels and launch shapes, storage scopes along the thread
hierarchy, barrier placement and cross-thread reductions, and its errors."""
from __future__ import annotations

import pytest

from gpu_schedules import func_of, row_reduce, shared_matmul, softmax
from looptune import Schedule
from looptune.codegen.gpu import is_gpu_func, lower_gpu
from looptune.runtime.error import BuildError
from looptune.tir.stmt import For, IfThenElse, SeqStmt, is_barrier


def _flat(stmt):
    """The statements of `stmt` in order, with loops and conditions unwrapped to a list of
    ("for", var name), ("if",), ("sync",), ("store", buffer name) events."""
    out = []

    def walk(s):
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                walk(x)
        elif isinstance(s, For):
            out.append(("for", s.loop_var.name))
            walk(s.body)
            out.append(("end", s.loop_var.name))
        elif isinstance(s, IfThenElse):
            walk(s.then_case)
        elif is_barrier(s):
            out.append(("sync",))
        elif hasattr(s, "buffer") and hasattr(s, "value"):
            out.append(("store", s.buffer.name))
        elif hasattr(s, "body"):
            walk(s.body)
    walk(stmt)
    return out


def test_a_tiled_matmul_is_one_kernel_with_shared_tiles_and_two_barriers_per_step():
    prog = lower_gpu(shared_matmul().func, vectorize=False)
    (k,) = prog.kernels
    assert (k.grid, k.block) == ((16, 1, 1), (64, 1, 1))
    assert sorted(b.name for b in k.shared) == ["A_shared", "B_shared"]
    assert all(b.scope == "shared" and b.size == 64 for b in k.shared)  # 8x8 tiles, all threads'
    assert k.shared_bytes == 2 * 64 * 4
    ev = _flat(k.body)
    body = ev[ev.index(("for", "k_0")) + 1: ev.index(("end", "k_0"))]
    # fetch A and B, sync, multiply the tiles, sync before the next step refills them
    stores = [e for e in body if e[0] in ("store", "sync")]
    assert stores == [("store", "A_shared"), ("store", "B_shared"), ("sync",),
                      ("store", "matmul_local"), ("sync",)]
    assert body.index(("sync",)) < body.index(("for", "k_1"))  # once per step, not per k_1


def test_intermediates_in_one_thread_block_are_shared_and_read_after_a_barrier():
    prog = lower_gpu(softmax().func, vectorize=False)
    (k,) = prog.kernels
    names = {b.name for b in k.shared}
    assert {"softmax_max", "softmax_expsum"} <= names  # one value per row, for all threads
    assert not prog.intermediates
    ev = [e for e in _flat(k.body) if e[0] in ("store", "sync")]
    # every read of the row's max / sum by other threads comes after a barrier
    last_max = max(i for i, e in enumerate(ev) if e == ("store", "softmax_max"))
    assert ("sync",) in ev[last_max + 1: ev.index(("store", "softmax_expsum_red_shared"), last_max)]
    last_sum = max(i for i, e in enumerate(ev) if e == ("store", "softmax_expsum"))
    assert ev[last_sum + 1] == ("sync",)


def test_a_reduction_bound_to_threads_becomes_a_tree_over_shared_memory():
    prog = lower_gpu(row_reduce(threads=8).func, vectorize=False)
    (k,) = prog.kernels
    assert (k.grid, k.block) == ((7, 1, 1), (8, 1, 1))
    (red,) = k.shared
    assert red.size == 8
    ev = [e for e in _flat(k.body) if e[0] in ("store", "sync")]
    # partials, publish, log2(8) = 3 halving steps each followed by a barrier, the result
    assert ev.count(("sync",)) == 4
    assert ev[-1] == ("store", "reduce_sum")


def test_unbound_loop_nests_are_refused_with_advice():
    func, _, _ = func_of("matmul", M=8, N=8, K=8)
    assert not is_gpu_func(func)
    with pytest.raises(BuildError, match="not bound to GPU threads.*bind"):
        lower_gpu(func)


def test_a_stage_left_unbound_beside_a_kernel_is_named():
    func, _, _ = func_of("softmax", M=4, N=8)
    sch = Schedule(func)
    i, _ = sch.get_loops(sch.get_block("softmax"))
    sch.bind(i, "blockIdx.x")
    with pytest.raises(BuildError, match="softmax_max.*not bound"):
        lower_gpu(sch.func)


def test_separate_kernels_keep_their_intermediates_global():
    func, _, _ = func_of("softmax", M=4, N=8)
    sch = Schedule(func)
    for name in ("softmax_max", "softmax_expsum", "softmax"):
        loops = sch.get_loops(sch.get_block(name))
        sch.bind(loops[0], "blockIdx.x")
        if name == "softmax":
            sch.bind(loops[1], "threadIdx.x")
    prog = lower_gpu(sch.func, vectorize=False)
    assert len(prog.kernels) == 3
    assert sorted(b.name for b in prog.intermediates) == ["softmax_expsum", "softmax_max"]
    assert all(b.scope == "global" for b in prog.intermediates)
    assert [k.block for k in prog.kernels] == [(1, 1, 1), (1, 1, 1), (8, 1, 1)]
    assert all(not k.shared for k in prog.kernels)


def test_a_thread_loop_shorter_than_the_launch_runs_guarded_and_a_barrier_inside_it_is_refused():
    # the reduction uses 4 threads where the output uses 8: its tree's barriers sit outside
    # the guarded loops, so this lowers
    func, _, _ = func_of("softmax", M=3, N=8)
    sch = Schedule(func)
    out = sch.get_block("softmax")
    i, j = sch.get_loops(out)
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    for name in ("softmax_expsum", "softmax_max"):
        b = sch.get_block(name)
        sch.compute_at(b, i)
        k = sch.get_loops(b)[-1]
        ko, ki = sch.split(k, [None, 4])
        sch.reorder(ki, ko)
        sch.bind(ki, "threadIdx.x")
    (k,) = lower_gpu(sch.func, vectorize=False).kernels
    assert k.block == (8, 1, 1)
