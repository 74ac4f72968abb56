"""Every illegal request raises ScheduleError naming what is wrong, and leaves the schedule
exactly as it was (same IR object, same trace)."""
from __future__ import annotations

import pytest

from looptune import te
from looptune.schedule import Schedule, ScheduleError


def two_stage():
    A = te.placeholder((32, 24), name="A")
    B = te.placeholder((24, 16), name="B")
    k = te.reduce_axis(24, "k")
    C = te.compute((32, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((32, 16), lambda i, j: C[i, j] * 2.0, name="D")
    return te.create_prim_func([A, B, D])


@pytest.fixture
def sch():
    return Schedule(two_stage(), seed=0)


def refused(sch, fn, match):
    before_func, before_len = sch.func, len(sch.trace)
    with pytest.raises(ScheduleError, match=match):
        fn()
    assert sch.func is before_func, "a refused request changed the IR"
    assert len(sch.trace) == before_len, "a refused request was recorded"


def test_reorder_loops_of_different_nests(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    di, dj = sch.get_loops(sch.get_block("D"))
    refused(sch, lambda: sch.reorder(j, di), r"not in one loop nest.*same nest")


def test_reorder_a_loop_twice(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    j0, j1 = sch.split(j, [2, 8])
    refused(sch, lambda: sch.reorder(j1, j1), "listed twice")


def test_fuse_non_adjacent_loops(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    refused(sch, lambda: sch.fuse(i, k), r"not directly nested in loop i.*adjacent")
    refused(sch, lambda: sch.fuse(j, i), r"not directly nested")


def test_split_factors_too_small(sch):
    i, _, _ = sch.get_loops(sch.get_block("C"))
    refused(sch, lambda: sch.split(i, [3, 4]), r"multiply to 12, less than the loop's extent 32")


def test_split_two_nones(sch):
    i, _, _ = sch.get_loops(sch.get_block("C"))
    refused(sch, lambda: sch.split(i, [None, None]), "at most one factor may be None")


def test_split_non_positive_factor(sch):
    i, _, _ = sch.get_loops(sch.get_block("C"))
    refused(sch, lambda: sch.split(i, [0, 32]), "must be positive")
    refused(sch, lambda: sch.split(i, [32]), "at least two factors")
    refused(sch, lambda: sch.split(i, [4.5, None]), "expected an integer")


def test_split_a_vectorized_loop(sch):
    _, j = sch.get_loops(sch.get_block("D"))
    sch.vectorize(j)
    refused(sch, lambda: sch.split(j, [None, 4]), "already vectorized; split it first")


def test_parallel_or_vectorize_a_reduction_loop(sch):
    _, _, k = sch.get_loops(sch.get_block("C"))
    refused(sch, lambda: sch.parallel(k), r"cannot parallelize loop k: it drives reduction "
                                          r"variable vk of block C.*rfactor")
    refused(sch, lambda: sch.vectorize(k), "cannot vectorize loop k")


def test_parallel_inside_parallel(sch):
    i, j = sch.get_loops(sch.get_block("D"))
    sch.parallel(i)
    refused(sch, lambda: sch.parallel(j), "inside parallel loop i")


def test_conflicting_loop_kinds(sch):
    i, j = sch.get_loops(sch.get_block("D"))
    sch.unroll(j)
    refused(sch, lambda: sch.vectorize(j), "already unrolled")


def test_loop_removed_by_an_earlier_split(sch):
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.split(i, [4, 8])
    refused(sch, lambda: sch.split(i, [2, 16]), "no longer exists.*split")


def test_unknown_block_lists_the_known_ones(sch):
    refused(sch, lambda: sch.get_block("E"), r"no block named 'E'; blocks are: C, D, root")


def test_bad_annotations(sch):
    b = sch.get_block("C")
    refused(sch, lambda: sch.annotate(b, "", 1), "non-empty string")
    refused(sch, lambda: sch.annotate(b, "x", [1, 2]), "must be an int, float, str")
    refused(sch, lambda: sch.unannotate(b, "missing"), "has no annotation 'missing'")


def test_bad_sampling_requests(sch):
    i, _, _ = sch.get_loops(sch.get_block("C"))
    refused(sch, lambda: sch.sample_perfect_tile(i, n=2, decision=[3, 3]),
            r"decision \[3, 3\] is not 2 positive factors of loop i's extent 32")
    refused(sch, lambda: sch.sample_categorical([1, 2], [0.5]), "one per candidate")
    refused(sch, lambda: sch.sample_categorical([1, 2], decision=5), "not an index")


def test_handles_of_another_schedule_are_refused(sch):
    other = Schedule(two_stage())
    b = other.get_block("C")
    refused(sch, lambda: sch.get_loops(b), "is not a block of this schedule")
    refused(sch, lambda: sch.split(b, [2, 16]), "expected a loop handle")


def test_bind_unknown_thread_axis(sch):
    i, j = sch.get_loops(sch.get_block("D"))
    refused(sch, lambda: sch.bind(i, "threadIdx.w"), "unknown thread axis")


# ---------------------------------------------------------------------------- block primitives
def three_stage():
    """P (elementwise) feeds C (reduction) and Q; E consumes C."""
    A = te.placeholder((16, 12), name="A")
    P = te.compute((16, 12), lambda i, k: A[i, k] * 2.0, name="P")
    k = te.reduce_axis(12, "k")
    C = te.compute((16,), lambda i: te.sum(P[i, k], axis=k), name="C")
    Q = te.compute((16, 12), lambda i, j: P[i, j] + 1.0, name="Q")
    E = te.compute((16,), lambda i: C[i] * Q[i, 0], name="E")
    return te.create_prim_func([A, E])


@pytest.fixture
def sch3():
    return Schedule(three_stage(), seed=0)


def test_compute_at_with_a_consumer_outside_the_loop(sch3):
    i, k = sch3.get_loops(sch3.get_block("C"))
    blk_P = sch3.get_block("P")
    refused(sch3, lambda: sch3.compute_at(blk_P, i),
            r"block\(s\) Q also read P but are not inside loop i")


def test_compute_at_of_a_consumer_into_its_producer(sch3):
    i, k = sch3.get_loops(sch3.get_block("P"))
    blk_C = sch3.get_block("C")
    refused(sch3, lambda: sch3.compute_at(blk_C, i),
            "runs after loop i.*reverse_compute_at")


def test_compute_at_of_an_output_block(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    blk_D = sch.get_block("D")
    refused(sch, lambda: sch.compute_at(blk_D, i),
            "writes D, an argument of the function, which must be computed whole")
    d_i, _ = sch.get_loops(sch.get_block("D"))
    sch.reverse_compute_at(sch.get_block("D"), i)  # the legal direction works


def test_reverse_compute_at_inside_a_reduction_loop(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    blk_D = sch.get_block("D")
    refused(sch, lambda: sch.reverse_compute_at(blk_D, k),
            r"drives reduction variable vk of block C, so C is not final inside it")


def test_inlining_a_reduction(sch3):
    blk_C = sch3.get_block("C")
    refused(sch3, lambda: sch3.compute_inline(blk_C),
            "block C is a reduction; only elementwise blocks")


def test_inlining_a_function_output(sch):
    blk_D = sch.get_block("D")
    refused(sch, lambda: sch.compute_inline(blk_D),
            "writes D, an argument of the function")


def test_reverse_inline_into_a_reduction(sch):
    blk_D = sch.get_block("D")
    refused(sch, lambda: sch.reverse_compute_inline(blk_D),
            "block C is a reduction")


def test_reverse_inline_with_two_consumers(sch3):
    blk_Q = sch3.get_block("Q")
    refused(sch3, lambda: sch3.reverse_compute_inline(blk_Q),
            "block C also reads P")


def test_cache_write_bad_buffer_index(sch):
    blk_C = sch.get_block("C")
    refused(sch, lambda: sch.cache_write(blk_C, 1, "local"),
            r"block C has no write buffer #1 \(write buffers: 0: C\)")
    blk_C = sch.get_block("C")
    refused(sch, lambda: sch.cache_read(blk_C, 2, "local"),
            r"block C has no read buffer #2 \(read buffers: 0: A, 1: B\)")
    blk_C = sch.get_block("C")
    refused(sch, lambda: sch.cache_write(blk_C, 0, "register"),
            "unknown storage scope 'register'")


def test_cache_write_after_the_consumer_moved_in(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reverse_compute_at(sch.get_block("D"), j)
    blk_C = sch.get_block("C")
    refused(sch, lambda: sch.cache_write(blk_C, 0, "local"),
            "block D reads C inside the same loop nest")


def test_rfactor_of_a_spatial_loop(sch):
    i, j, k = sch.get_loops(sch.get_block("C"))
    refused(sch, lambda: sch.rfactor(i, 0), "loop i does not drive a reduction variable")
    refused(sch, lambda: sch.rfactor(k, 5), "factor_axis 5 is out of range for C")


def test_decompose_reduction_inside_the_reduction_loop(sch):
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    k0, k1 = sch.split(k, [4, 6])
    refused(sch, lambda: sch.decompose_reduction(c, k1),
            r"loop k_1 is inside reduction loop\(s\) k_0 of block C")
    blk_D = sch.get_block("D")
    refused(sch, lambda: sch.decompose_reduction(blk_D, i),
            "block D has no init")
    di, _ = sch.get_loops(sch.get_block("D"))
    refused(sch, lambda: sch.decompose_reduction(c, di), "loop i is not around block C")


def test_storage_align_and_set_scope_refusals(sch):
    blk_D = sch.get_block("D")
    refused(sch, lambda: sch.storage_align(blk_D, 0, 0, 16, 1),
            "D is an argument of the function")
    blk_C = sch.get_block("C")
    refused(sch, lambda: sch.storage_align(blk_C, 0, 3, 16, 1),
            "axis 3 is out of range")
    blk_C = sch.get_block("C")
    refused(sch, lambda: sch.storage_align(blk_C, 0, 0, 16, 16),
            "0 <= offset < factor")
    blk_C = sch.get_block("C")
    refused(sch, lambda: sch.set_scope(blk_C, 0, "texture"), "unknown storage scope")


def test_sampled_locations_only_go_to_compute_at(sch3):
    p = sch3.get_block("P")
    loc = sch3.sample_compute_location(p, decision=-1)
    refused(sch3, lambda: sch3.split(loc, [2, None]), "stands for the location 'root'")
    refused(sch3, lambda: sch3.sample_compute_location(p, decision=7), "is not a location")
