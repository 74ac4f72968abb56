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
