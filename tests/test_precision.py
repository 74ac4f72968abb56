"""Lower precision chosen by the user: a float32 model's constant-weight matmuls in bfloat16
(graph/precision.py), the accuracy report of every such compile, clear errors for bad
calibration data; and the default schedule of int8 and bf16 matmuls on the CPU's units
(dlight/cpu_intrin.py)."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune import te
from looptune.dlight import default_schedule
from looptune.graph import GraphBuilder, compile_model, evaluate
from looptune.graph.ir import GraphError
from looptune.graph.precision import accuracy, to_bfloat16
from looptune.target import Target
from looptune.tir.func import PrimFunc

ml_dtypes = pytest.importorskip("ml_dtypes")
RNG = np.random.default_rng(5)


def mlp(T=64, D=64, F=128):
    g = GraphBuilder("mlp")
    x = g.input("x", (T, D))
    w1 = g.const("w1", RNG.normal(0, 0.1, (F, D)).astype("float32"))  # a linear layer's (N, K)
    w2 = g.const("w2", RNG.normal(0, 0.1, (F, D)).astype("float32"))  # (K, N)
    h = g.op("gelu", g.op("matmul", x, w1, transpose_b=True))
    y = g.op("add", g.op("matmul", h, w2), x)
    return g.finish(y)


def test_bf16_puts_constant_weight_matmuls_in_bfloat16_and_the_rest_in_float32():
    graph = mlp()
    low = to_bfloat16(graph)
    ops = [n.op for n in low.nodes]
    assert ops == ["cast", "matmul", "gelu", "cast", "matmul", "add"]
    mms = [n for n in low.nodes if n.op == "matmul"]
    for mm, n in zip(mms, (128, 64)):
        x, w = mm.inputs
        assert x.dtype == "bfloat16" and w.is_const and w.dtype == "bfloat16"
        assert w.shape == (n, 64 if n == 128 else 128) and mm.attrs == {"transpose_b": True}
        assert mm.output.dtype == "float32"  # summed in float32
    x = RNG.normal(0, 1, (64, 64)).astype("float32")
    want, got = evaluate(graph, x)[0], evaluate(low, x)[0]
    err = np.max(np.abs(got - want)) / np.max(np.abs(want))
    assert 1e-5 < err < 2e-2  # bf16's rounding, not float32's


@pytest.mark.cc
def test_a_bf16_compile_reports_its_error_against_float32(capsys):
    graph = mlp()
    x = RNG.normal(0, 1, (64, 64)).astype("float32")
    m = compile_model(graph, None, "cpu", num_threads=1, precision="bf16", calibration=[(x,)])
    printed = capsys.readouterr().out
    assert "precision bf16: max error" in printed and "against float32 on 1 input(s)" in printed
    assert m.precision == "bf16" and 0 < m.accuracy["max_rel_error"] < 2e-2
    want = evaluate(graph, x)[0]
    got = m(x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < 2e-2
    assert compile_model(graph, None, "cpu", num_threads=1).accuracy is None  # float32


def test_bad_calibration_data_and_precisions_are_refused_by_name():
    graph = mlp()
    x = RNG.normal(0, 1, (64, 64)).astype("float32")
    with pytest.raises(GraphError, match="calibration is empty"):
        compile_model(graph, precision="bf16", calibration=[])
    with pytest.raises(GraphError, match=r"example 0: input x must have shape \(64, 64\), got "
                                         r"\(3, 64\)"):
        compile_model(graph, precision="bf16", calibration=[(x[:3],)])
    bad = x.copy()
    bad[1, 2] = np.nan
    with pytest.raises(GraphError, match="example 1: input x holds NaN"):
        compile_model(graph, precision="bf16", calibration=[(x,), (bad,)])
    with pytest.raises(GraphError, match="example 0 has 2 arrays; the model takes 1"):
        compile_model(graph, precision="bf16", calibration=[(x, x)])
    with pytest.raises(GraphError, match="unknown precision 'fp8'"):
        compile_model(graph, precision="fp8")


def test_accuracy_counts_the_worst_error_and_top1_agreement():
    ref = [[np.array([[1.0, 2.0, 0.5], [3.0, -1.0, 0.0]])]]
    got = [[np.array([[1.1, 2.0, 0.5], [2.9, 3.1, 0.0]])]]
    acc = accuracy(ref, got)
    assert acc["max_rel_error"] == pytest.approx(4.1 / 3.0) and acc["top1"] == 0.5


def _task(a_dtype, w_dtype, acc, M, N, K):
    A = te.placeholder((M, K), a_dtype, name="A")
    W = te.placeholder((N, K), w_dtype, name="W")
    C = te.ops.matmul(A, W, transpose_b=True, out_dtype=acc)
    f = te.create_prim_func([A, W, C])
    return PrimFunc(f.name, f.params, f.body, f.attrs + (("layout_free_params", (1,)),))


@pytest.mark.cc
@pytest.mark.parametrize("M,threads", [(64, 1), (5, 1), (256, 2)])
def test_the_default_schedule_computes_int8_matmuls_on_the_best_unit_exactly(M, threads):
    """5 rows: AMX's 32-row tiles do not divide them. Two threads: each configures its own
    tiles (an unconfigured thread's first tile load is an illegal instruction)."""
    target = Target.create("cpu")
    sch = default_schedule(_task("uint8", "int8", "int32", M, 96, 128), target)
    used = [inst.attrs[0] for inst in sch.trace.insts if inst.kind.name == "Tensorize"]
    assert all(u in target.tensor_intrins() for u in used)
    if "x86_dot_u8s8_8x4_avx2" in target.tensor_intrins():
        assert used  # every x86 machine with AVX2 has a unit for it
    mod = lt.build(sch, target=target, num_threads=threads)
    a = RNG.integers(0, 256, (M, 128)).astype("uint8")
    w = RNG.integers(-128, 128, (96, 128)).astype("int8")
    c = np.zeros((M, 96), "int32")
    mod(*mod.pack(a, w, c))
    np.testing.assert_array_equal(c, a.astype(np.int64) @ w.astype(np.int64).T)


@pytest.mark.cc
def test_the_default_schedule_computes_bf16_matmuls_on_the_best_unit():
    target = Target.create("cpu")
    sch = default_schedule(_task("bfloat16", "bfloat16", "float32", 64, 64, 96), target)
    used = [inst.attrs[0] for inst in sch.trace.insts if inst.kind.name == "Tensorize"]
    bf16_units = [u for u in target.tensor_intrins() if "bf16" in u]
    assert bool(used) == bool(bf16_units) and set(used) <= set(bf16_units)
    mod = lt.build(sch, target=target, num_threads=1)
    a = RNG.normal(0, 1, (64, 96)).astype(ml_dtypes.bfloat16)
    w = RNG.normal(0, 1, (64, 96)).astype(ml_dtypes.bfloat16)
    c = np.zeros((64, 64), "float32")
    mod(*mod.pack(a, w, c))
    want = a.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)
