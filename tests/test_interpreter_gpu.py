"""The reference interpreter on GPU programs: thread by thread, shared memory per block,
barriers in step, and data races / divergent barriers as errors. Pure Python, no GPU."""
from __future__ import annotations

import numpy as np
import pytest

import gpu_programs as gp
from looptune.codegen.gpu.examples import tiled_matmul
from looptune.tir import dtype as dt
from looptune.tir import interpreter
from looptune.tir.interpreter_gpu import (GpuBarrierError, GpuRaceError, GpuSyncError,
                                          compile_kernel, run_program)

RNG = np.random.default_rng(11)


def rand(*shape, dtype="float32"):
    """Random values away from zero, so a missed write or a wrong product shows."""
    return (RNG.uniform(0.5, 1.5, shape) * RNG.choice([-1, 1], shape)).astype(dtype)


def nans(*shape):
    return np.full(shape, np.nan, "float32")


# ------------------------------------------------------------------------------ semantics
def test_tiled_matmul_matches_numpy():
    a, b, c = rand(32, 32), rand(32, 32), nans(32, 32)
    run_program(tiled_matmul(), a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_run_accepts_a_gpu_program():
    a, b, c = rand(16, 16), rand(16, 16), nans(16, 16)
    interpreter.run(tiled_matmul(16, 4), a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_kernel_source_is_readable():
    src = compile_kernel(tiled_matmul().kernels[0]).source
    assert src.startswith("# tiled_matmul_kernel0: grid (4, 4, 1), block (8, 8, 1)")
    assert "tx_ = _tx" in src and src.count("yield") == 2


def test_shared_memory_is_shared_in_a_block_and_fresh_per_block():
    a, first, out = rand(12), nans(12), nans(12)
    run_program(gp.shared_per_block(blocks=3, threads=4), a, first, out)
    assert np.isnan(first).all()  # no block sees another block's tile
    np.testing.assert_array_equal(out, a.reshape(3, 4)[:, ::-1].reshape(-1))


def test_local_allocate_is_private_per_thread():
    a, out = rand(4), nans(4)
    run_program(gp.local_private(4), a, out)
    np.testing.assert_array_equal(out, 2 * a)


def test_guarded_thread_loop_runs_only_its_extent():
    a, out1, out2 = rand(8), nans(8), nans(8)
    run_program(gp.guarded(launch=8, extent=5), a, out1, out2)
    np.testing.assert_array_equal(out1, a)
    np.testing.assert_array_equal(out2[:5], 2 * a[:5])
    assert np.isnan(out2[5:]).all()


def test_a_barrier_orders_global_memory_within_a_block():
    a, mid, out = rand(4), nans(4), nans(4)
    run_program(gp.global_neighbour(4, with_barrier=True), a, mid, out)
    np.testing.assert_array_equal(out, np.roll(a, -1))


def test_redundant_writes_of_one_value_are_not_races():
    a, out = rand(4), nans(4)
    run_program(gp.shared_broadcast(4, same_value=True), a, out)
    np.testing.assert_array_equal(out, np.full(4, a[0]))


# ------------------------------------------------------------------------------ errors
def test_missing_barriers_in_tiled_matmul_are_races():
    a, b, c = rand(32, 32), rand(32, 32), nans(32, 32)
    with pytest.raises(GpuRaceError, match=r"shared buffer (As|Bs)") as e:
        run_program(tiled_matmul(with_barriers=False), a, b, c)
    msg = str(e.value)
    assert "tiled_matmul_kernel0" in msg and "__syncthreads() is missing" in msg
    assert "thread (" in msg and "of block (0, 0, 0)" in msg
    assert e.value.buffer in ("As", "Bs") and len(e.value.threads) == 2
    assert e.value.kind in ("read-after-write", "write-after-read")


@pytest.mark.parametrize("else_barrier", [False, True])
def test_divergent_barrier(else_barrier):
    with pytest.raises(GpuBarrierError, match="divergent barrier") as e:
        run_program(gp.divergent_barrier(8, else_barrier=else_barrier), rand(8), nans(8))
    assert isinstance(e.value, GpuSyncError)
    assert ("the end of the kernel" in str(e.value)) != else_barrier


def test_two_threads_writing_one_global_element_race():
    with pytest.raises(GpuRaceError, match="write-write race on global buffer out, element 0") as e:
        run_program(gp.global_write_write(4), rand(4), nans(1))
    assert "cross-thread reduction" in str(e.value)
    assert e.value.threads[0][1] != e.value.threads[1][1]


def test_reduction_bound_to_blocks_races():
    with pytest.raises(GpuRaceError, match="blocks never synchronize") as e:
        run_program(gp.global_accumulate(4), rand(4), np.zeros(1, "float32"))
    assert e.value.threads[0][0] != e.value.threads[1][0]  # two different blocks


def test_global_memory_race_within_a_block_without_barrier():
    with pytest.raises(GpuRaceError, match=r"buffer mid.*__syncthreads\(\) is missing"):
        run_program(gp.global_neighbour(4, with_barrier=False), rand(4), nans(4), nans(4))


def test_different_values_to_one_shared_element_race():
    with pytest.raises(GpuRaceError, match="write-write race on shared buffer S"):
        run_program(gp.shared_broadcast(4, same_value=False), rand(4), nans(4))


@pytest.mark.parametrize("in_load", [False, True])
def test_negative_offsets_are_out_of_bounds(in_load):
    name = "A" if in_load else "out"
    with pytest.raises(IndexError, match=rf"{name}\[-1\]") as e:
        run_program(gp.shift(4, in_load=in_load), rand(4), nans(4))
    assert "thread (0, 0, 0) of block (0, 0, 0)" in str(e.value)


# ------------------------------------------------------------------------------ dtypes
def test_float16_rounds_every_operation():
    a, b, c = (rand(8, dtype="float16") for _ in range(3))
    out, out2 = np.zeros(8, "float16"), np.zeros(8, "float16")
    run_program(gp.fma("float16"), a, b, c, out, out2)
    np.testing.assert_array_equal(out, a * b + c)  # numpy float16 rounds each op too
    np.testing.assert_array_equal(out2, (a.astype("float32") * 3).astype("float16"))


def test_bfloat16():
    ml_dtypes = pytest.importorskip("ml_dtypes")  # numpy's bfloat16 (the `cuda` extra)
    assert dt.parse("bfloat16") == ("bfloat16", 1)
    bf = ml_dtypes.bfloat16
    a, b, c = (rand(8).astype(bf) for _ in range(3))
    out, out2 = np.zeros(8, bf), np.zeros(8, bf)
    run_program(gp.fma("bfloat16"), a, b, c, out, out2)
    np.testing.assert_array_equal(out.astype("float32"), (a * b + c).astype("float32"))
    np.testing.assert_array_equal(out2.astype("float32"),
                                  (a.astype("float32") * 3).astype(bf).astype("float32"))


# ------------------------------------------------------------------------------ lowered
def _matmul_schedule(*, cooperative: bool):
    from looptune import te
    from looptune.schedule import Schedule
    from looptune.te import ops
    tensors, _, _ = ops.workload("matmul", M=16, N=16, K=16)
    sch = Schedule(te.create_prim_func(tensors))
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    io, ii = sch.split(i, [2, 8])
    jo, ji = sch.split(j, [2, 8])
    sch.reorder(io, jo, ii, ji)
    for loop, tag in ((io, "blockIdx.x"), (jo, "blockIdx.y"), (ii, "threadIdx.y"),
                      (ji, "threadIdx.x")):
        sch.bind(loop, tag)
    ko, _ = sch.split(k, [4, 4])
    fetch = sch.cache_read(blk, 0, "shared")
    sch.compute_at(fetch, ko)
    if cooperative:  # the 8x4 tile: 4 rounds of 8 threads
        fused = sch.fuse(*sch.get_loops(fetch)[-2:])
        _, inner = sch.split(fused, [4, 8])
        sch.bind(inner, "threadIdx.x")
    return sch


@pytest.mark.parametrize("cooperative", [False, True])
def test_run_lowers_a_thread_bound_function(cooperative):
    sch = _matmul_schedule(cooperative=cooperative)
    a, b, c = rand(16, 16), rand(16, 16), nans(16, 16)
    interpreter.run(sch.func, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_run_takes_a_function_lowered_for_the_cpu_pipeline():
    from looptune.codegen import lower
    func = lower(_matmul_schedule(cooperative=True).func, vectorize=False)
    a, b, c = rand(16, 16), rand(16, 16), nans(16, 16)
    interpreter.run(func, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_cross_thread_reduction_runs_race_free():
    from looptune import te
    from looptune.schedule import Schedule
    from looptune.te import ops
    tensors, _, _ = ops.workload("matmul", M=8, N=8, K=16)
    sch = Schedule(te.create_prim_func(tensors))
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "blockIdx.y")
    ko, ki = sch.split(k, [2, 8])
    sch.reorder(ki, ko)
    sch.bind(ki, "threadIdx.x")
    a, b, c = rand(8, 16), rand(16, 8), nans(8, 8)
    interpreter.run(sch.func, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_kernels_run_in_order_through_an_intermediate():
    from looptune import te
    from looptune.schedule import Schedule
    A = te.placeholder((64,), "float32", name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((64,), lambda i: B[i] + 1.0, name="C")
    sch = Schedule(te.create_prim_func([A, C]))
    for name in ("B", "C"):  # B is not inlined: two kernels, B global between them
        (i,) = sch.get_loops(sch.get_block(name))
        outer, inner = sch.split(i, [4, 16])
        sch.bind(outer, "blockIdx.x")
        sch.bind(inner, "threadIdx.x")
    a, c = rand(64), nans(64)
    interpreter.run(sch.func, a, c)
    np.testing.assert_allclose(c, a * 2 + 1)
