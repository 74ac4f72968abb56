"""Virtual threads (codegen/gpu/vthread.py): a vthread loop is pushed down to the statements
that use it, so a shared tile is fetched once for all virtual threads and each virtual
thread keeps its own register tile. Checked thread by thread against numpy (no GPU), on the
IR, and, where nvcc is installed, by compiling the kernel (registers, no spills)."""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from gpu_schedules import func_of, vthread_matmul

from looptune import Schedule
from looptune.codegen.cuda import render_cuda
from looptune.codegen.gpu import lower_gpu
from looptune.codegen.gpu.vthread import inject_vthreads
from looptune.target import cuda_target
from looptune.tir import interpreter
from looptune.tir.buffer import Buffer
from looptune.tir.expr import BufferLoad, Var, binary, const
from looptune.tir.func import PrimFunc
from looptune.tir.functor import find_stmts, find_stmts_with_parents
from looptune.tir.stmt import BufferStore, For

TARGET = cuda_target("sm_80")


def rand(shape, seed):
    rng = np.random.default_rng(seed)
    return (rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape)).astype("float32")


def enclosing_loops(kernel, buffer_name):
    """Names of the loops around each store into `buffer_name`."""
    return [[p.loop_var.name for p in parents if isinstance(p, For)]
            for s, parents in find_stmts_with_parents(kernel.body, BufferStore)
            if s.buffer.name == buffer_name]


@pytest.mark.parametrize("vt,tx,reg", [(2, 4, 2), (4, 2, 1), (2, 2, 4), (1, 4, 2)])
def test_vthread_matmul_matches_numpy_thread_by_thread(vt, tx, reg):
    M, N, K = 2 * vt * tx * reg, vt * tx * reg, 12
    sch = vthread_matmul(M=M, N=N, K=K, vt=vt, tx=tx, reg=reg, k_tile=4)
    a, b = rand((M, K), 0), rand((K, N), 1)
    out = np.full((M, N), np.nan, "float32")
    interpreter.run(sch.func, a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def test_shared_tiles_are_fetched_once_for_all_virtual_threads():
    vt, tx, reg, k_tile = 2, 4, 2, 4
    sch = vthread_matmul(M=32, N=32, K=16, vt=vt, tx=tx, reg=reg, k_tile=k_tile)
    (kernel,) = lower_gpu(sch.func, TARGET).kernels
    (vthread_var,) = {lp.loop_var.name for lp in find_stmts(sch.func.body, For)
                      if lp.kind == "thread_binding" and lp.thread == "vthread.x"}
    rows = vt * tx * reg  # one tile covers the rows (columns) of every virtual thread
    assert {b.name: b.shape for b in kernel.shared} == {"A_shared": (rows * k_tile,),
                                                        "B_shared": (k_tile * rows,)}
    for name in ("A_shared", "B_shared"):
        (loops,) = enclosing_loops(kernel, name)
        assert vthread_var not in loops, loops
    # the accumulator: one register tile per virtual thread, the vthread loop innermost
    (acc, parents) = [(s, p) for s, p in find_stmts_with_parents(kernel.body, BufferStore)
                      if s.buffer.name == "matmul_local" and "matmul_local" in str(s.value)][0]
    assert acc.buffer.shape == (vt * vt * reg * reg,)
    assert [p for p in parents if isinstance(p, For)][-1].loop_var.name == vthread_var
    src = render_cuda(lower_gpu(sch.func, TARGET))
    assert src.count("__syncthreads();") == 2  # per k step: after the copy, before the next


def test_a_barrier_under_a_vthread_loop_keeps_it_serial():
    """Rows on virtual threads, each reduced across real threads (a shared-memory tree with
    barriers): the virtual threads run one after the other, and the result is right."""
    func, _, ref = func_of("reduce_sum", M=8, N=13)
    sch = Schedule(func)
    b = sch.get_block("reduce_sum")
    i, k = sch.get_loops(b)
    io, iv = sch.split(i, [None, 4])
    ko, ki = sch.split(k, [None, 8])
    sch.reorder(io, iv, ki, ko)
    sch.bind(io, "blockIdx.x")
    sch.bind(iv, "vthread.x")
    sch.bind(ki, "threadIdx.x")
    x = rand((8, 13), 2)
    out = np.full((8,), np.nan, "float32")
    interpreter.run(sch.func, x, out)
    np.testing.assert_allclose(out, ref(x), rtol=1e-5, atol=1e-5)
    (kernel,) = lower_gpu(sch.func, TARGET).kernels
    (serial,) = [lp for lp in find_stmts(kernel.body, For) if lp.loop_var.name == iv_name(sch)]
    assert serial.kind == "unrolled" and "syncthreads" in str(serial.body)


def iv_name(sch):
    (v,) = {lp.loop_var.name for lp in find_stmts(sch.func.body, For)
            if lp.kind == "thread_binding" and lp.thread == "vthread.x"}
    return v


def vthread_func(body_of):
    x = Buffer("x", (4,), "float32")
    y = Buffer("y", (4,), "float32")
    vt = Var("vt")
    body = For(vt, 4, "thread_binding", body_of(x, y, vt), "vthread.x")
    return PrimFunc("f", (x, y), body)


def test_a_statement_without_the_variable_runs_once_only_when_that_is_the_same():
    ld0 = lambda b: BufferLoad(b, (const(0),), "float32")  # noqa: E731
    copy = vthread_func(lambda x, y, vt: BufferStore(x, ld0(y), (const(0),)))
    assert isinstance(inject_vthreads(copy).body, BufferStore)  # a copy: once
    add = vthread_func(lambda x, y, vt: BufferStore(x, binary("+", ld0(x), const(1.0)),
                                                    (const(0),)))
    loop = inject_vthreads(add).body  # an accumulation: four times, as written
    assert isinstance(loop, For) and loop.extent == 4 and loop.kind == "unrolled"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("vt,tx,reg", [(2, 16, 4), (4, 8, 2)])
def test_virtual_thread_tiles_stay_in_registers(vt, tx, reg, tmp_path):
    """ptxas: the per-virtual-thread accumulators are registers (no stack frame, no spills)."""
    sch = vthread_matmul(M=512, N=512, K=256, vt=vt, tx=tx, reg=reg, k_tile=8)
    src = tmp_path / "k.cu"
    src.write_text(render_cuda(lower_gpu(sch.func, TARGET)))
    out = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-Xptxas", "-v", "-o",
                          str(tmp_path / "k.cubin"), str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert re.search(r"\b0 bytes stack frame, 0 bytes spill stores", out.stderr), out.stderr
