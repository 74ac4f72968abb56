"""Cross-thread reductions by warp shuffles (codegen/gpu/warp.py): row reductions over 8 to 256
threads run thread by thread in the interpreter against numpy, the shuffle used exactly where
it is valid (the shared-memory tree elsewhere), fewer barriers, CUDA that nvcc compiles, and
the interpreter's check that every lane of a warp reaches a shuffle."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import gpu_programs as gp
from looptune import Schedule, te
from looptune.codegen.cuda import render_cuda
from looptune.codegen.gpu import lower_gpu
from looptune.tir import interpreter
from looptune.tir.buffer import Buffer
from looptune.tir.expr import Var, binary, const
from looptune.tir.interpreter_gpu import GpuBarrierError, run_program
from looptune.tir.stmt import Allocate, IfThenElse, seq, shfl_down

REDUCERS = {"sum": (te.sum, np.sum), "max": (te.max, np.max)}


def row_reduce(op="sum", *, M=4, N=300, T=32, rows=1, dtype="float32", axis="threadIdx.x"):
    """Y[i] = op over X[i, :]: the reduction split with its inner T on `axis`; `rows` rows
    per thread block on threadIdx.y (else one per block)."""
    X = te.placeholder((M, N), dtype, "X")
    k = te.reduce_axis(N, "k")
    Y = te.compute((M,), lambda i: REDUCERS[op][0](X[i, k], axis=k), name="Y")
    sch = Schedule(te.create_prim_func([X, Y]))
    i, kk = sch.get_loops(sch.get_block("Y"))
    ko, ki = sch.split(kk, [None, T])
    if rows > 1:
        io, ii = sch.split(i, [None, rows])
        sch.reorder(io, ii, ki, ko)
        sch.bind(ii, "threadIdx.y")
    else:
        io = i
        sch.reorder(i, ki, ko)
    sch.bind(io, "blockIdx.x")
    sch.bind(ki, axis)
    return sch.func


def check(func, op="sum", *, M, N, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 1, (M, N)).astype(dtype)  # mostly negative: max must not start at 0
    y = np.full(M, np.nan, dtype)
    interpreter.run(func, x, y)
    ref = REDUCERS[op][1](x.astype("float64"), axis=1)
    tol = 2e-2 if dtype == "float16" else 1e-5
    np.testing.assert_allclose(y.astype("float64"), ref, rtol=tol, atol=tol)


def cuda(func) -> str:
    return render_cuda(lower_gpu(func))


SHUFFLED = {  # name -> row_reduce arguments: all reduce with warp shuffles
    "T32": dict(T=32), "T64": dict(T=64), "T128": dict(T=128), "T256": dict(T=256, M=2),
    "T96": dict(T=96, M=2), "T8_rows4": dict(T=8, rows=4), "T16_rows2": dict(T=16, rows=2),
    "T64_rows2": dict(T=64, rows=2), "T256_N100": dict(T=256, M=2, N=100)}


@pytest.mark.parametrize("op", sorted(REDUCERS))
@pytest.mark.parametrize("case", sorted(SHUFFLED))
def test_shuffled_row_reduction_matches_numpy(case, op):
    args = {"M": 4, "N": 300, **SHUFFLED[case]}
    func = row_reduce(op, **args)
    src = cuda(func)
    assert "__shfl_down_sync" in src and src.count("__syncthreads") <= 1
    check(func, op, M=args["M"], N=args["N"])


@pytest.mark.parametrize("dtype", ["float16", "float64", "int32"])
def test_shuffles_of_other_element_types(dtype):
    func = row_reduce("max" if dtype == "int32" else "sum", M=2, N=200, T=64, dtype=dtype)
    assert "__shfl_down_sync" in cuda(func)
    if dtype == "int32":
        rng = np.random.default_rng(1)
        x = rng.integers(-1000, -1, (2, 200)).astype("int32")
        y = np.zeros(2, "int32")
        interpreter.run(func, x, y)
        np.testing.assert_array_equal(y, x.max(axis=1))
    else:
        check(func, M=2, N=200, dtype=dtype)


NOT_SHUFFLED = {  # the shared-memory tree: not a power of two, not threadIdx.x, no overload,
    # not whole warps (8 threads), threadIdx.x launched wider than the reduction
    "T48": lambda: row_reduce(T=48), "on_threadIdx_y": lambda: row_reduce(axis="threadIdx.y"),
    "int16": lambda: row_reduce("max", T=32, dtype="int16"),
    "partial_warp": lambda: row_reduce(T=8)}


@pytest.mark.parametrize("case", sorted(NOT_SHUFFLED))
def test_ineligible_reductions_keep_the_shared_memory_tree(case):
    func = NOT_SHUFFLED[case]()
    src = cuda(func)
    assert "__shfl_down_sync" not in src and "Y_red_shared" in src
    if case == "int16":
        rng = np.random.default_rng(2)
        x = rng.integers(-100, -1, (4, 300)).astype("int16")
        y = np.zeros(4, "int16")
        interpreter.run(func, x, y)
        np.testing.assert_array_equal(y, x.max(axis=1))
    else:
        check(func, M=4, N=300)


def test_a_wider_launch_keeps_the_tree():
    """Another loop of the kernel launches 64 threads on x: a 32-thread reduction then runs
    under `if tx < 32` and its rows are not whole groups of lanes."""
    X = te.placeholder((4, 64), "float32", "X")
    k = te.reduce_axis(64, "k")
    S = te.compute((4,), lambda i: te.sum(X[i, k], axis=k), name="S")
    Y = te.compute((4, 64), lambda i, j: X[i, j] - S[i], name="Y")
    sch = Schedule(te.create_prim_func([X, Y]))
    i, j = sch.get_loops(sch.get_block("Y"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    s = sch.get_block("S")
    sch.compute_at(s, i)
    ko, ki = sch.split(sch.get_loops(s)[-1], [None, 32])
    sch.reorder(ki, ko)
    sch.bind(ki, "threadIdx.x")
    assert "__shfl_down_sync" not in cuda(sch.func)
    x = np.random.default_rng(3).uniform(-1, 1, (4, 64)).astype("float32")
    y = np.full((4, 64), np.nan, "float32")
    interpreter.run(sch.func, x, y)
    np.testing.assert_allclose(y, x - x.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)


def test_rows_in_a_serial_loop_reuse_the_warps_shared_slots_safely():
    """Several rows per thread block, one after the other: the next row's warp leaders must
    not overwrite the slots the first warp still reads (a barrier at the loop's end)."""
    X = te.placeholder((8, 200), "float32", "X")
    k = te.reduce_axis(200, "k")
    Y = te.compute((8,), lambda i: te.max(X[i, k], axis=k), name="Y")
    sch = Schedule(te.create_prim_func([X, Y]))
    i, kk = sch.get_loops(sch.get_block("Y"))
    io, ii = sch.split(i, [None, 4])
    ko, ki = sch.split(kk, [None, 64])
    sch.reorder(io, ii, ki, ko)
    sch.bind(io, "blockIdx.x")
    sch.bind(ki, "threadIdx.x")
    src = cuda(sch.func)
    assert "__shfl_down_sync" in src and src.count("__syncthreads") == 2
    check(sch.func, "max", M=8, N=200)


def test_a_256_thread_row_reduction_needs_one_barrier_not_nine():
    src = cuda(row_reduce(T=256, M=2))
    assert src.count("__syncthreads") == 1
    assert src.count("__shfl_down_sync") == 5 + 3  # 32 lanes, then 8 warps' results
    tree = cuda(row_reduce(T=256, M=2, dtype="int16"))  # no shuffle for int16: the tree
    assert tree.count("__syncthreads") == 9


def test_a_sub_warp_reduction_needs_no_shared_memory():
    src = cuda(row_reduce(T=8, rows=4))
    assert "__shfl_down_sync(0xffffffffu, Y_red[0], 4, 8)" in src
    assert "__shared__" not in src and "__syncthreads" not in src


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("case,dtype", [("T256", "float32"), ("T8_rows4", "float32"),
                                        ("T96", "float16"), ("T64", "float64")])
def test_nvcc_compiles_the_shuffles(case, dtype, tmp_path):
    src = tmp_path / f"{case}.cu"
    src.write_text(cuda(row_reduce(dtype=dtype, **{"M": 4, "N": 300, **SHUFFLED[case]})))
    out = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-o", str(tmp_path / "k.cubin"),
                          str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr + src.read_text()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_nvrtc_compiles_the_shuffles(dtype):
    from looptune.runtime import cuda as rc
    from looptune.runtime.cuda_compile import _nvrtc_version
    if _nvrtc_version() is None or (dtype == "float16" and not rc.include_dirs()):
        pytest.skip("NVRTC (with cuda_fp16.h) is not installed")
    source = cuda(row_reduce(T=128, rows=2, dtype=dtype))
    cubin = rc.compile_cuda(source, arch="sm_90", name=f"warp_{dtype}", compiler="nvrtc")
    assert cubin.read_bytes()[:4] == b"\x7fELF"


# ------------------------------------------------------------------ the interpreter's shuffle
def _shuffle_kernel(threads, delta, width, *, lanes=None):
    """out[t] = A[t] shuffled down by `delta` in groups of `width`; with `lanes`, only
    threads t < lanes shuffle (a divergent shuffle when that splits a warp)."""
    A, out = Buffer("A", (threads,), "float32"), Buffer("out", (threads,), "float32")
    loc = Buffer("loc", (1,), "float32", "local")
    tx, zero = Var("tx"), const(0)
    body = seq(gp.st(loc, zero, gp.ld(A, tx)),
               gp.st(loc, zero, shfl_down(gp.ld(loc, zero), delta, width)))
    if lanes is not None:
        body = IfThenElse(binary("<", tx, const(lanes)), body, gp.st(loc, zero, gp.ld(A, tx)))
    body = Allocate(loc, seq(body, gp.st(out, tx, gp.ld(loc, zero))))
    return gp.one_kernel("shuffle", (A, out), gp.bound(tx, threads, "threadIdx.x", body),
                         block=(threads, 1, 1))


@pytest.mark.parametrize("delta,width", [(1, 32), (16, 32), (2, 8), (1, 2)])
def test_the_interpreter_shuffles_as_cuda_does(delta, width):
    a = np.arange(64, dtype="float32")
    out = np.full(64, np.nan, "float32")
    run_program(_shuffle_kernel(64, delta, width), a, out)
    lane = np.arange(64) % width
    np.testing.assert_array_equal(out, np.where(lane + delta < width, a + delta, a))


@pytest.mark.parametrize("lanes", [16, 40])
def test_a_shuffle_that_splits_a_warp_is_a_divergent_shuffle(lanes):
    with pytest.raises(GpuBarrierError, match="divergent warp shuffle") as e:
        run_program(_shuffle_kernel(64, 1, 32, lanes=lanes), np.ones(64, "float32"),
                    np.zeros(64, "float32"))
    assert e.value.kind == "divergent shuffle"
    assert f"warp {lanes // 32}" in str(e.value) and "the end of the kernel" in str(e.value)


def test_whole_warps_may_skip_a_shuffle():
    a = np.arange(64, dtype="float32")
    out = np.full(64, np.nan, "float32")
    run_program(_shuffle_kernel(64, 1, 32, lanes=32), a, out)  # warp 0 shuffles, warp 1 not
    np.testing.assert_array_equal(out[:32], np.where(np.arange(32) < 31, a[:32] + 1, a[:32]))
    np.testing.assert_array_equal(out[32:], a[32:])


def test_the_cpu_cannot_shuffle():
    from looptune.codegen.cstyle import CStyleRenderer
    from looptune.runtime.error import BuildError
    with pytest.raises(BuildError, match="no warp shuffle"):
        CStyleRenderer().expr(shfl_down(const(1.0, "float32"), 1, 32))
    with pytest.raises(ValueError, match="power of two"):
        shfl_down(const(1.0, "float32"), 1, 48)
