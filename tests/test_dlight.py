"""looptune.dlight, the zero-search default schedules. CUDA: matmul, batch_matmul, dense with
its epilogue, conv2d, softmax, layer_norm, row reductions, an elementwise chain and odd ones
get a schedule with no search whose every loop nest is bound to blockIdx / threadIdx, that
the interpreter runs thread by thread to numpy's result, and that renders as CUDA C (on a
GPU, also runs there). CPU: the default schedules are the ones compile_model has always used,
trace for trace (tests/golden/dlight_cpu_traces.json; `python tests/test_dlight.py --regen`
rewrites it, for a change made on purpose)."""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from looptune import Schedule, ScheduleError, te
from looptune.dlight import DEFAULT_RULES, Rule, apply_rules, default_schedule
from looptune.target import Target, cuda_target
from looptune.te.ops import OPS, reference, workload
from looptune.tir import interpreter
from looptune.tir.func import PrimFunc
from looptune.tir.functor import find_stmts
from looptune.tir.stmt import For, SeqStmt

CUDA = cuda_target("sm_80")  # a named architecture: its limits, no driver needed
GOLDEN = Path(__file__).parent / "golden" / "dlight_cpu_traces.json"


# ------------------------------------------------------------------------------ GPU cases
def _op(name, **shape):
    tensors, ref, _ = workload(name, **shape)
    return tensors, ref


def _elementwise_chain():
    """gelu(relu(x + y) * y), four stages, y broadcast along rows."""
    x = te.placeholder((6, 37), name="x")
    y = te.placeholder((37,), name="y")
    a = te.ops.add(x, y)
    b = te.ops.relu(a)
    c = te.ops.multiply(b, y)
    d = te.ops.gelu(c)
    return [x, y, d], lambda x, y: reference.gelu(reference.relu(x + y) * y)


def _transpose_pool():
    """An NHWC input transposed to NCHW, then 3x3 max pooling with stride 2 and padding."""
    x = te.placeholder((1, 9, 7, 3), name="x")
    t = te.compute((1, 3, 9, 7), lambda n, c, h, w: x[n, h, w, c], name="transpose")
    p = te.ops.max_pool2d(t, kernel=3, stride=2, padding=1)
    return [x, p], lambda x: reference.max_pool2d(x.transpose(0, 3, 1, 2), 3, 2, 1)


def _mean(M, N):
    """A row sum, then a stage scaling it: a reduction with a consumer over the same rows."""
    x = te.placeholder((M, N), name="x")
    return [x, te.ops.reduce_mean(x, axis=1)], lambda x: x.mean(axis=1)


def _total(n):
    """A full reduction: no spatial loop at all."""
    x = te.placeholder((n,), name="x")
    return [x, te.ops.reduce_sum(x)], lambda x: x.sum(keepdims=True)


def _column_max(M, N):
    """A reduction over the first axis: its loop outside the spatial one."""
    x = te.placeholder((M, N), name="x")
    return [x, te.ops.reduce_max(x, axis=0)], lambda x: x.max(axis=0)


def _logsumexp(M, N):
    """Two reductions (the second the last stage) and an elementwise stage on the rows."""
    x = te.placeholder((M, N), name="x")
    k1, k2 = te.reduce_axis(N, "k1"), te.reduce_axis(N, "k2")
    mx = te.compute((M,), lambda i: te.max(x[i, k1], axis=k1), name="mx")
    s = te.compute((M,), lambda i: te.sum(te.exp(x[i, k2] - mx[i]), axis=k2), name="s")
    out = te.compute((M,), lambda i: te.log(s[i]) + mx[i], name="lse")
    return [x, out], lambda x: np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)) + x.max(1)


def _gemv(N, K, epilogue=False):
    """y[j] = sum_k W[j, k] * x[k] (a row reduction per output), then relu(y + b)."""
    w = te.placeholder((N, K), name="w")
    x = te.placeholder((K,), name="x")
    k = te.reduce_axis(K, "k")
    y = te.compute((N,), lambda j: te.sum(w[j, k] * x[k], axis=k), name="gemv")
    if not epilogue:
        return [w, x, y], lambda w, x: w @ x
    b = te.placeholder((N,), name="b")
    z = te.compute((N,), lambda j: te.max(y[j] + b[j], 0.0), name="bias_relu")
    return [w, x, b, z], lambda w, x, b: np.maximum(w @ x + b, 0)


def _conv_bias_relu():
    """relu(conv2d(x, w) + b[k]): the epilogue applied as each thread writes back."""
    x = te.placeholder((1, 6, 8, 8), name="x")
    w = te.placeholder((16, 6, 3, 3), name="w")
    b = te.placeholder((1, 16, 1, 1), name="b")
    y = te.ops.relu(te.ops.add(te.ops.conv2d_nchw(x, w, stride=1, padding=1), b))
    return [x, w, b, y], lambda x, w, b: np.maximum(
        reference.conv2d_nchw(x, w, 1, 1) + b, 0)


# a GPU of one multiprocessor: the matmul rule keeps its largest tiles even for small shapes
ONE_SM = dataclasses.replace(CUDA, cores=1)

# name: (tensors and numpy reference, the rule expected to schedule it[, target])
GPU_CASES = {
    "matmul": (lambda: _op("matmul", M=13, N=17, K=9), "gpu-matmul"),
    "matmul_tiles": (lambda: _op("matmul", M=70, N=68, K=40), "gpu-matmul"),
    "matmul_register_tiles": (lambda: _op("matmul", M=70, N=68, K=40), "gpu-matmul", ONE_SM),
    "batch_matmul_register_tiles": (lambda: _op("batch_matmul", batch=2, M=33, N=70, K=20),
                                    "gpu-matmul", ONE_SM),
    "dense_register_tiles": (lambda: _op("dense", batch=20, in_features=40, out_features=70),
                             "gpu-matmul", ONE_SM),
    "vector_matrix": (lambda: _op("matmul", M=1, N=70, K=50), "gpu-matmul"),
    "matmul_add": (lambda: _op("matmul_add", M=12, N=10, K=7), "gpu-matmul"),
    "batch_matmul": (lambda: _op("batch_matmul", batch=2, M=5, N=7, K=6), "gpu-matmul"),
    "dense_bias_relu": (lambda: _op("dense", batch=3, in_features=11, out_features=9),
                        "gpu-matmul"),
    "gemv": (lambda: _gemv(20, 24), "gpu-reduction"),
    "gemv_bias_relu": (lambda: _gemv(20, 40, epilogue=True), "gpu-reduction"),
    "dense_one_row": (lambda: _op("dense", batch=1, in_features=40, out_features=9),
                      "gpu-matmul"),
    "conv2d": (lambda: _op("conv2d", N=1, C=3, H=7, W=6, K=4, R=3, S=3, stride=1, pad=1,
                           dilation=1), "gpu-conv"),
    "conv2d_tiles": (lambda: _op("conv2d", N=2, C=12, H=8, W=8, K=16, R=3, S=3, stride=1,
                                 pad=1, dilation=1), "gpu-conv", ONE_SM),
    "conv2d_strided_dilated": (lambda: _op("conv2d", N=2, C=5, H=11, W=9, K=8, R=3, S=3,
                                           stride=2, pad=2, dilation=2), "gpu-conv"),
    "conv2d_1x1": (lambda: _op("conv2d", N=1, C=16, H=6, W=6, K=24, R=1, S=1, stride=1,
                               pad=0, dilation=1), "gpu-conv", ONE_SM),
    "conv2d_bias_relu": (_conv_bias_relu, "gpu-conv"),
    "conv2d_nhwc": (lambda: _op("conv2d_nhwc", N=1, C=3, H=6, W=7, K=5, R=3, S=3, stride=2,
                                pad=1, dilation=1), "gpu-conv"),
    "depthwise_conv2d": (lambda: _op("depthwise_conv2d", N=1, C=3, H=7, W=9, R=3, S=3,
                                     stride=1, pad=1), "gpu-conv"),
    "softmax": (lambda: _op("softmax", M=5, N=11), "gpu-general-reduction"),
    "softmax_long_rows": (lambda: _op("softmax", M=3, N=300), "gpu-general-reduction"),
    "layer_norm": (lambda: _op("layer_norm", M=4, N=13), "gpu-general-reduction"),
    "logsumexp": (lambda: _logsumexp(3, 40), "gpu-general-reduction"),
    "reduce_sum": (lambda: _op("reduce_sum", M=7, N=13), "gpu-reduction"),
    "reduce_sum_rows_per_block": (lambda: _op("reduce_sum", M=8, N=13), "gpu-reduction"),
    "reduce_mean": (lambda: _mean(6, 40), "gpu-reduction"),
    "reduce_mean_rows_per_block": (lambda: _mean(8, 20), "gpu-reduction"),
    "reduce_total": (lambda: _total(100), "gpu-reduction"),
    "reduce_column_max": (lambda: _column_max(40, 3), "gpu-reduction"),
    "reduce_many_columns": (lambda: _column_max(8, 300), "gpu-fallback"),
    "softmax_short_rows": (lambda: _op("softmax", M=40, N=6), "gpu-fallback"),
    "relu": (lambda: _op("relu", N=1, C=2, H=5, W=7), "gpu-elementwise"),
    "elementwise_chain": (_elementwise_chain, "gpu-elementwise"),
    "long_elementwise": (lambda: _op("add", N=1, C=3, H=20, W=10), "gpu-elementwise"),
    "transpose_pool": (_transpose_pool, "gpu-fallback"),
    "max_pool2d": (lambda: _op("max_pool2d", N=1, C=2, H=9, W=7, kernel=3, stride=2, pad=1),
                   "gpu-fallback"),
}


def _inputs(tensors, seed=0):
    """Random values away from zero, so a missed write or a wrong product shows."""
    rng = np.random.default_rng(seed)
    return [(rng.uniform(0.5, 1.5, t.shape) * rng.choice([-1, 1], t.shape)).astype(t.dtype)
            for t in tensors[:-1]]


def _case(name):
    make, rule, *target = GPU_CASES[name]
    tensors, ref = make()
    return te.create_prim_func(tensors), tensors, ref, rule, (target or [CUDA])[0]


def unbound_nests(func) -> list:
    """The top-level loop nests of `func` that lack a blockIdx or a threadIdx loop."""
    body = func.root.body
    items = body.stmts if isinstance(body, SeqStmt) else (body,)
    out = []
    for item in items:
        tags = {lp.thread.split(".")[0] for lp in find_stmts(item, For)
                if lp.kind == "thread_binding"}
        if not {"blockIdx", "threadIdx"} <= tags:
            out.append(item)
    return out


@pytest.mark.parametrize("name", sorted(GPU_CASES))
def test_a_gpu_default_schedule_binds_every_nest_and_matches_numpy(name):
    func, tensors, ref, rule, target = _case(name)
    used, sch = apply_rules(func, target)
    assert used.name == rule
    assert not sch.trace.sampling_instructions()  # no search: nothing sampled
    assert not unbound_nests(sch.func), sch.func.script()
    ins = _inputs(tensors)
    out = np.full(tensors[-1].shape, np.nan, dtype=tensors[-1].dtype)
    interpreter.run(sch.func, *ins, out)  # thread by thread, races checked
    np.testing.assert_allclose(out, ref(*ins), rtol=1e-5, atol=1e-5)
    assert default_schedule(func, target).trace.as_python() == \
        default_schedule(func, target).trace.as_python()  # deterministic


@pytest.mark.parametrize("name", sorted(GPU_CASES))
def test_a_gpu_default_schedule_renders_as_cuda(name):
    from looptune.build import generate_source, lower_for_gpu
    func, *_, target = _case(name)
    scheduled, source = generate_source(default_schedule(func, target), target)
    kernels = lower_for_gpu(scheduled, target).kernels
    assert kernels and source.count("__global__") == len(kernels), source
    assert "threadIdx.x" in source and "blockIdx.x" in source


def test_the_matmul_tiles_stage_inputs_in_shared_memory_and_accumulate_in_registers():
    from looptune.codegen.gpu import lower_gpu
    func, *_ = _case("matmul_tiles")  # 70 x 68 x 40
    sch = default_schedule(func, ONE_SM)
    scopes = {b.name: b.scope for b in sch.func.root.alloc_buffers}
    assert scopes["A_shared"] == scopes["B_shared"] == "shared"
    assert scopes["matmul_local"] == "local"
    (kernel,) = lower_gpu(sch.func, ONE_SM, vectorize=False).kernels
    # 64 x 64 tiles: 16 x 16 threads of 4 x 4 outputs
    assert kernel.block == (256, 1, 1) and kernel.grid == (4, 1, 1)
    # the reduction steps by 10, a divisor of 40: no guarded last step
    assert "k_0 in range(4)" in sch.func.script()


def test_matmul_tiles_shrink_until_every_multiprocessor_has_a_block():
    from looptune.codegen.gpu import lower_gpu
    assert CUDA.cores == 108
    tensors, _ = _op("matmul", M=70, N=68, K=40)  # 4 blocks of 64 x 64
    (kernel,) = lower_gpu(default_schedule(te.create_prim_func(tensors), CUDA).func, CUDA,
                          vectorize=False).kernels
    assert kernel.grid[0] >= 108 and kernel.block[0] >= 32  # a warp a block at least
    tensors, _ = _op("matmul", M=1024, N=1024, K=64)  # 256 blocks of 64 x 64: enough
    (kernel,) = lower_gpu(default_schedule(te.create_prim_func(tensors), CUDA).func, CUDA,
                          vectorize=False).kernels
    assert kernel.grid == (256, 1, 1) and kernel.block == (256, 1, 1)


def test_a_convolution_stages_its_padded_window_and_weights_in_shared_memory():
    from looptune.codegen.gpu import lower_gpu
    func, *_ = _case("conv2d_tiles")  # 2 x 16 x 8 x 8 outputs, 12 input channels
    sch = default_schedule(func, ONE_SM)
    scopes = {b.name: b.scope for b in sch.func.root.alloc_buffers}
    # the padding is computed tile by tile into shared memory: no padded copy in global
    assert scopes["pad"] == scopes["W_shared"] == "shared"
    assert scopes["conv2d_nchw_local"] == "local"
    (kernel,) = lower_gpu(sch.func, ONE_SM, vectorize=False).kernels
    # threads along x (8), then y (8), then output channels (4) with 4 channels each
    assert kernel.block == (256, 1, 1) and kernel.grid == (2, 1, 1)
    shared = {b.name: b.size for b in kernel.shared}
    # the window of a 8 x 8 tile under a 3 x 3 kernel is 10 x 10, per step of 6 channels
    assert shared["pad"] == 6 * 10 * 10 and shared["W_shared"] == 16 * 6 * 9
    assert "rc_0 in range(2)" in sch.func.script()


def test_convolution_tiles_shrink_until_every_multiprocessor_has_a_block():
    from looptune.codegen.gpu import lower_gpu
    tensors, _ = _op("conv2d", N=1, C=64, H=7, W=7, K=128, R=3, S=3, stride=1, pad=1,
                     dilation=1)
    (kernel,) = lower_gpu(default_schedule(te.create_prim_func(tensors), CUDA).func, CUDA,
                          vectorize=False).kernels
    assert kernel.grid[0] >= CUDA.cores and kernel.block[0] >= 32


def test_a_thread_per_output_fallback_accumulates_in_a_register():
    func, *_ = _case("max_pool2d")
    scopes = {b.name: b.scope for b in default_schedule(func, CUDA).func.root.alloc_buffers}
    assert "local" in scopes.values()


def test_large_matmuls_get_virtual_threads_and_a_padded_tile():
    """4096^3: 128 x 128 blocks of 16 x 16 threads, each 2 x 2 virtual threads of 4 x 4
    outputs (64 accumulators), A's tile rows padded to 17; checked on a small scale (the
    same rule with 4 x 4 threads of 2 x 2) against numpy."""
    from looptune.codegen.gpu import lower_gpu
    from looptune.dlight.gpu import Matmul
    tensors, _ = _op("matmul", M=4096, N=4096, K=4096)
    sch = default_schedule(te.create_prim_func(tensors), CUDA)
    (kernel,) = lower_gpu(sch.func, CUDA, vectorize=False).kernels
    assert kernel.grid == (1024, 1, 1) and kernel.block == (256, 1, 1)
    local = [b for b in find_stmts(kernel.body, _alloc_type()) if b.buffer.scope == "local"]
    assert [b.buffer.size for b in local] == [64]
    a_shared = {b.name: b for b in kernel.shared}["A_shared"]
    assert a_shared.size == 127 * 17 + 16  # 128 rows of 16, each padded to 17
    tensors, ref = _op("matmul", M=64, N=32, K=12)
    func = te.create_prim_func(tensors)
    rule, small = apply_rules(func, ONE_SM, rules=[Matmul(threads=4, per_thread=2)])
    assert any(lp.thread == "vthread.x" for lp in find_stmts(small.func.body, For)
               if lp.kind == "thread_binding")
    ins = _inputs(tensors)
    out = np.full(tensors[-1].shape, np.nan, "float32")
    interpreter.run(small.func, *ins, out)
    np.testing.assert_allclose(out, ref(*ins), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("name,shape", [
    ("matmul", dict(M=4096, N=4096, K=4096)),
    ("conv2d", dict(N=8, C=64, H=56, W=56, K=64, R=3, S=3, stride=1, pad=1, dilation=1)),
    ("conv2d_nhwc", dict(N=1, C=64, H=56, W=56, K=64, R=3, S=3, stride=1, pad=1, dilation=1)),
    ("softmax", dict(M=4096, N=4096)), ("layer_norm", dict(M=8192, N=1024))])
def test_default_kernels_at_full_size_keep_their_tiles_in_registers(name, shape, tmp_path):
    """ptxas on the default schedules of the benchmark's shapes: no stack frame, no spills
    (a register tile indexed at run time would live in local memory)."""
    from looptune.codegen.cuda import render_cuda
    from looptune.codegen.gpu import lower_gpu
    tensors, _ = _op(name, **shape)
    sch = default_schedule(te.create_prim_func(tensors), CUDA)
    src = tmp_path / "k.cu"
    src.write_text(render_cuda(lower_gpu(sch.func, CUDA)))
    out = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-Xptxas", "-v", "-o",
                          str(tmp_path / "k.cubin"), str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores", out.stderr)
    assert frames and all(f == ("0", "0") for f in frames), out.stderr


def _alloc_type():
    from looptune.tir.stmt import Allocate
    return Allocate


def test_a_short_dimension_gives_its_threads_to_the_other():
    from looptune.codegen.gpu import lower_gpu
    tensors, _ = _op("matmul", M=2, N=300, K=32)
    sch = default_schedule(te.create_prim_func(tensors), ONE_SM)
    (kernel,) = lower_gpu(sch.func, ONE_SM, vectorize=False).kernels
    assert kernel.block == (256, 1, 1) and kernel.grid == (1, 1, 1)  # 2 x 128 threads of 1 x 4


def test_short_rows_share_a_thread_block_along_threadIdx_y():
    from looptune.codegen.gpu import lower_gpu
    func, *_ = _case("reduce_sum_rows_per_block")  # 8 rows of 13: 16 threads each
    (kernel,) = lower_gpu(default_schedule(func, CUDA).func, CUDA, vectorize=False).kernels
    assert kernel.block == (16, 4, 1) and kernel.grid == (2, 1, 1)


def test_softmax_is_one_kernel_a_row_per_thread_block():
    from looptune.codegen.gpu import lower_gpu
    func, *_ = _case("softmax_long_rows")  # 3 rows of 300
    (kernel,) = lower_gpu(default_schedule(func, CUDA).func, CUDA, vectorize=False).kernels
    assert kernel.grid == (3, 1, 1) and kernel.block == (256, 1, 1)


def test_the_rule_lists_are_data_and_rules_are_named():
    assert DEFAULT_RULES["cuda"][-1] == "gpu-fallback"
    assert DEFAULT_RULES["cpu"] == ("cpu-default",)
    for names in DEFAULT_RULES.values():
        for n in names:
            assert Rule.create(n).name == n
    with pytest.raises(ValueError, match="unknown dlight rule 'nope'"):
        Rule.create("nope")


def test_a_rule_that_gives_up_part_way_leaves_the_next_rule_a_clean_start():
    class Halfway(Rule):
        def apply(self, func_or_sch, target):
            sch = Schedule(func_or_sch, seed=0)
            sch.split(sch.get_loops(sch.get_block("relu"))[0], [None, 2])
            raise ScheduleError("not this one")

    func, *_ = _case("relu")
    rule, sch = apply_rules(func, CUDA, rules=[Halfway(), "gpu-elementwise"])
    assert rule.name == "gpu-elementwise"
    alone = default_schedule(func, CUDA, rules=["gpu-elementwise"])
    assert sch.trace.as_python() == alone.trace.as_python()
    with pytest.raises(ScheduleError, match="(?s)no default schedule rule.*not this one"):
        apply_rules(func, CUDA, rules=[Halfway()])


def test_a_schedule_can_be_continued_and_is_left_untouched():
    func, tensors, ref, *_ = _case("softmax")
    start = Schedule(func, seed=0)
    start.get_block("softmax")
    before = start.trace.as_python()
    sch = default_schedule(start, CUDA)
    assert start.trace.as_python() == before
    assert sch.trace.as_python().startswith(before)
    ins = _inputs(tensors)
    out = np.full(tensors[-1].shape, np.nan, dtype="float32")
    interpreter.run(sch.func, *ins, out)
    np.testing.assert_allclose(out, ref(*ins), rtol=1e-5, atol=1e-5)


def test_an_unknown_target_kind_says_which_have_rules():
    with pytest.raises(ValueError, match="cpu, cuda"):
        default_schedule(_case("relu")[0], Target(kind="fpga"))


@pytest.mark.gpu
@pytest.mark.parametrize("name,shape", [("matmul", dict(M=512, N=384, K=256)),
                                        ("dense", dict(batch=64, in_features=300,
                                                       out_features=200)),
                                        ("softmax", dict(M=64, N=1000)),
                                        ("layer_norm", dict(M=64, N=768)),
                                        ("conv2d", dict(N=1, C=16, H=14, W=14, K=32, R=3, S=3,
                                                        stride=1, pad=1, dilation=1))])
def test_default_schedules_run_on_the_gpu(name, shape):
    import looptune as lt
    tensors, ref = _op(name, **shape)
    sch = default_schedule(te.create_prim_func(tensors), "cuda")
    ins = _inputs(tensors)
    out = np.full(tensors[-1].shape, np.nan, dtype="float32")
    lt.build(sch, "cuda")(*ins, out)
    np.testing.assert_allclose(out, ref(*ins), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------ CPU
VECTOR_BITS = (128, 256, 512)
CORES = (1, 2, 4, 8, 16, 32, 64, 128)
SHOWN = "256b/2c"  # the target whose traces the golden file holds in full, for a diff


def cpu_cases() -> dict:
    """Every registered operator at its small and its default shape (with its weight marked
    layout-free where it has one), and the tasks of the test models."""
    from test_compile_model import chain
    from test_graph import mlp, resnet_block
    from test_layout import conv_net
    from workloads_small import SMALL

    from looptune.graph import extract_tasks
    out = {}
    for name in sorted(OPS):
        for tag, shape in (("small", SMALL[name]), ("default", {})):
            f = te.create_prim_func(workload(name, **shape)[0])
            out[f"{name}/{tag}"] = f
            if len(f.params) > 2:
                out[f"{name}/{tag}/layout_free"] = PrimFunc(
                    f.name, f.params, f.body, f.attrs + (("layout_free_params", (1,)),))
    for gname, graph in (("mlp", mlp()), ("resnet_block", resnet_block()),
                         ("conv_net", conv_net(c=32, hw=8)), ("chain", chain())):
        for task in extract_tasks(graph):
            out[f"{gname}/{task.task_name}"] = task.func
    return out


def _cpu_target(key: str) -> Target:
    bits, cores = key.split("/")
    return Target(kind="cpu", vector_bits=int(bits[:-1]), cores=int(cores[:-1]))


def _digest(sch) -> str:
    return hashlib.sha256(sch.trace.to_json_str().encode()).hexdigest()[:16]


def golden_traces() -> dict:
    cases = cpu_cases()
    hashes, shown = {}, {}
    for name, func in cases.items():
        hashes[name] = {}
        for bits in VECTOR_BITS:
            for cores in CORES:
                key = f"{bits}b/{cores}c"
                sch = default_schedule(func, _cpu_target(key))
                hashes[name][key] = _digest(sch)
                if key == SHOWN:
                    shown[name] = sch.trace.as_python()
    return {"hashes": hashes, "python_256b_2c": shown}


@pytest.fixture(scope="module")
def golden():
    return json.loads(GOLDEN.read_text())


@pytest.fixture(scope="module")
def cases():
    return cpu_cases()


def _check(golden, name, func, key, target):
    sch = default_schedule(func, target)
    if _digest(sch) == golden["hashes"][name][key]:
        return
    detail = ""
    if key == SHOWN:
        detail = "\n" + "\n".join(difflib.unified_diff(
            golden["python_256b_2c"][name].splitlines(), sch.trace.as_python().splitlines(),
            "before", "now", lineterm=""))
    pytest.fail(f"the CPU default schedule of {name} on {key} changed{detail}")


@pytest.mark.parametrize("key", [f"{b}b/{c}c" for b in VECTOR_BITS for c in CORES])
def test_cpu_default_schedules_are_trace_for_trace_the_old_ones(golden, cases, key):
    assert set(cases) == set(golden["hashes"])
    for name, func in cases.items():
        _check(golden, name, func, key, _cpu_target(key))


def test_cpu_default_schedules_on_the_host_are_the_old_ones(golden, cases):
    """The golden traces are the generic target's: a host with other caches decides some
    tile orders otherwise (a weight that fits in half its L2), and one with int8 or bf16
    units tiles those blocks around them (dlight/cpu_intrin.py)."""
    host = Target.create("cpu")
    key = f"{host.vector_bits}b/{host.cores}c"
    if key not in golden["hashes"]["matmul/small"]:
        pytest.skip(f"no golden traces for a host of {key}")
    generic = _cpu_target(key)
    if host.l2_bytes != generic.l2_bytes:
        pytest.skip(f"this host's L2 ({host.l2_bytes} bytes) is not the golden target's "
                    f"({generic.l2_bytes})")
    for name, func in cases.items():
        if host.tensor_intrins() and name.startswith("matmul_u8s8"):
            continue
        _check(golden, name, func, key, host)


def test_the_graph_default_schedule_is_dlights():
    import looptune.dlight as dlight
    from looptune.graph import planner
    from looptune.graph.default_schedule import default_schedule as alias
    assert alias is dlight.default_schedule
    assert planner.default_schedule is dlight.default_schedule  # what the model compiler uses


if __name__ == "__main__" and sys.argv[1:] == ["--regen"]:
    sys.path.insert(0, str(Path(__file__).parent))
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(golden_traces(), indent=1, sort_keys=True))
    print(f"wrote {GOLDEN}")
