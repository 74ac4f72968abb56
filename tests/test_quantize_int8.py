"""Post-training int8 quantization of float32 models (graph/quantize.py, precision="int8" and
"int8-dynamic"): the rewrite checked bit for bit against a numpy model of the same
quantization, its matmuls on the u8 x s8 units after prepare, the accuracy report of a
compile, clear errors for bad calibration data, and the command line."""
from __future__ import annotations

import numpy as np
import pytest

from looptune.cli import main
from looptune.graph import Graph, GraphBuilder, compile_model, evaluate
from looptune.graph.ir import GraphError
from looptune.graph.precision import accuracy, lower_precision
from looptune.graph.quantize import activation_params
from looptune.graph.simplify import prepare

RNG = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def _fresh_rng():
    """Every test draws the same numbers whatever ran before it (pytest-xdist's order)."""
    global RNG
    RNG = np.random.default_rng(11)


def _x(*shape, scale=1.0):
    """Random inputs without zeros."""
    x = RNG.normal(0, scale, shape).astype("float32")
    return np.where(x == 0, np.float32(0.5), x)


def mlp(T=16, D=64, F=96, C=10):
    """linear (N, K) weight + bias, relu, linear (K, N) weight: a classifier's (T, C)."""
    g = GraphBuilder("mlp")
    x = g.input("x", (T, D))
    w1 = g.const("w1", RNG.normal(0, 0.1, (F, D)).astype("float32"))
    b1 = g.const("b1", RNG.normal(0, 0.1, (F,)).astype("float32"))
    h = g.op("relu", g.op("add", g.op("matmul", x, w1, transpose_b=True), b1))
    w2 = g.const("w2", RNG.normal(0, 0.1, (F, C)).astype("float32"))
    return g.finish(g.op("matmul", h, w2))


def cnn(N=2):
    """conv + batch norm + relu, strided conv + relu, max pool, linear."""
    g = GraphBuilder("cnn")
    x = g.input("x", (N, 3, 16, 16))
    h = g.op("conv2d", x, g.const("w1", RNG.normal(0, 0.3, (8, 3, 3, 3)).astype("float32")),
             padding=1)
    h = g.op("mul", h, g.const("bn_scale", RNG.uniform(0.5, 2, (1, 8, 1, 1)).astype("float32")))
    h = g.op("relu", g.op("add", h, g.const("bn_shift", RNG.normal(0, 0.1, (1, 8, 1, 1))
                                           .astype("float32"))))
    h = g.op("conv2d", h, g.const("w2", RNG.normal(0, 0.2, (16, 8, 3, 3)).astype("float32")),
             padding=1, stride=2)
    h = g.op("max_pool2d", g.op("relu", h), kernel=2, stride=2)
    h = g.op("reshape", h, shape=(N, 16 * 4 * 4))
    w3 = g.const("w3", RNG.normal(0, 0.1, (10, 256)).astype("float32"))
    return g.finish(g.op("matmul", h, w3, transpose_b=True))


def _values(graph: Graph, names, *inputs) -> list:
    """The values of the nodes named `names`, evaluated with numpy."""
    by_name = {n.name: n.output for n in graph.nodes}
    return evaluate(Graph(graph.name, graph.inputs, graph.nodes, [by_name[n] for n in names]),
                    *inputs)


# ------------------------------------------------------------------ a numpy model
def _quantize(x, scale, zp):
    return np.clip(np.round(x / scale) + np.float32(zp), 0, 255).astype(np.int64)


def _weights(w_nk):
    """Symmetric int8 per output channel (row of an (N, K) weight)."""
    s = (np.max(np.abs(w_nk), axis=1) / np.float32(127)).astype(np.float32)
    return np.clip(np.round(w_nk / s[:, None]), -127, 127).astype(np.int64), s


def _range_params(lo, hi):
    """ONNX Runtime's uint8 scale and zero point for [min(lo, 0), max(hi, 0)]."""
    lo, hi = np.float32(min(lo, 0)), np.float32(max(hi, 0))
    scale = np.float32((hi - lo) / np.float32(255))
    return scale, int(np.clip(np.round(-lo / scale), 0, 255))


def _numpy_mlp(graph, x, params):
    """The quantized MLP: (its two int32 products, its output), `params(layer, activation)`
    giving each activation's scale and zero point."""
    w1, b1, w2 = (c.data for c in graph.constants)
    accs = []
    h = x
    for layer, w_nk in enumerate((w1, w2.T)):
        scale, zp = params(layer, h)
        w_q, s_w = _weights(w_nk)
        acc = (_quantize(h, scale, zp) - zp) @ w_q.T
        accs.append(acc)
        y = acc.astype(np.float32) * (scale * s_w)
        if layer == 0:
            h = np.maximum(y + b1, 0)
    return accs, y


def test_static_int8_is_bit_exact_against_a_numpy_model_of_its_quantization():
    graph = mlp()
    cal = [(_x(16, 64),) for _ in range(3)]
    low = lower_precision(graph, "int8", calibration=cal)
    x = _x(16, 64)
    # the calibrated ranges: of the float32 model's activations over the examples
    h = [np.maximum(c[0] @ graph.constants[0].data.T + graph.constants[1].data, 0) for c in cal]
    ranges = [(min(c[0].min() for c in cal), max(c[0].max() for c in cal)),
              (min(a.min() for a in h), max(a.max() for a in h))]
    accs, want = _numpy_mlp(graph, x, lambda layer, _: _range_params(*ranges[layer]))
    got_accs = _values(low, ["matmul", "matmul_1"], x)
    for a, b in zip(got_accs, accs):
        assert a.dtype == np.int32
        np.testing.assert_array_equal(a, b)  # the integer parts: bit for bit
    got = evaluate(low, x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    ref = evaluate(graph, x)[0]
    err = np.max(np.abs(got - ref)) / np.max(np.abs(ref))
    assert 1e-4 < err < 5e-2  # int8's rounding, not float32's


def test_dynamic_int8_quantizes_with_each_calls_range_exactly_as_dynamic_quantize_linear():
    graph = mlp()
    low = lower_precision(graph, "int8-dynamic")
    assert not any(n.op == "conv2d" for n in low.nodes)
    for scale in (1.0, 30.0):  # a range far beyond another call's: adapted to, not clipped
        x = _x(16, 64, scale=scale)
        accs, want = _numpy_mlp(graph, x, lambda _, a: _range_params(a.min(), a.max()))
        for a, b in zip(_values(low, ["matmul", "matmul_1"], x), accs):
            np.testing.assert_array_equal(a, b)
        got = evaluate(low, x)[0]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        ref = evaluate(graph, x)[0]
        assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) < 5e-2


def test_static_ranges_are_the_calibrations_and_dynamic_ones_each_calls():
    graph = mlp()
    cal = [(_x(16, 64),) for _ in range(3)]
    static = lower_precision(graph, "int8", calibration=cal)
    dynamic = lower_precision(graph, "int8-dynamic")
    x = _x(16, 64, scale=8.0)  # 8x the calibrated range: static saturates
    ref = evaluate(graph, x)
    errs = [accuracy([ref], [evaluate(g, x)])["max_rel_error"] for g in (static, dynamic)]
    assert errs[1] < 5e-2 < errs[0]


def test_activation_ranges_include_zero_and_an_all_zero_one_has_scale_one():
    assert activation_params(0.0, 0.0) == (np.float32(1), 0)
    scale, zp = activation_params(0.5, 2.0)  # all positive (after a relu): from 0
    assert zp == 0 and scale == np.float32(2.0) / np.float32(255)
    scale, zp = activation_params(-3.0, -1.0)  # all negative: up to 0
    assert zp == 255 and scale == np.float32(3.0) / np.float32(255)
    assert activation_params(-1.0, 3.0) == _range_params(-1.0, 3.0)


@pytest.mark.parametrize("precision", ["int8", "int8-dynamic"])
def test_quantized_matmuls_go_to_the_u8_by_s8_units_after_prepare(precision):
    graph = mlp()
    low = lower_precision(graph, precision, calibration=[(_x(16, 64),)])
    mms = [n for n in low.nodes if n.op == "matmul"]
    assert [(n.inputs[0].dtype, n.inputs[1].dtype, n.output.dtype) for n in mms] == \
        [("int32", "int32", "int32")] * 2  # the ONNX importer's exact form
    for n in mms:
        assert -127 <= n.inputs[1].data.min() and n.inputs[1].data.max() <= 127
    assert [(n.inputs[0].dtype, n.inputs[1].dtype) for n in prepare(low).nodes
            if n.op == "matmul"] == [("uint8", "int8")] * 2


def test_static_int8_quantizes_convolutions_per_channel_after_folding_batch_norms():
    graph = cnn()
    cal = [(_x(2, 3, 16, 16),) for _ in range(3)]
    low = lower_precision(graph, "int8", calibration=cal)
    convs = [n for n in low.nodes if n.op == "conv2d"]
    assert len(convs) == 2
    for n in convs:
        x, w = n.inputs
        assert x.dtype == w.dtype == n.output.dtype == "int32"
        assert w.is_const and np.abs(w.data).max() == 127  # each channel's largest is +-127
        assert np.all(np.abs(w.data).max(axis=(1, 2, 3)) == 127)
    assert sum(n.op == "mul" for n in low.nodes) == 3  # one dequantization each; bn folded
    x = _x(2, 3, 16, 16)
    acc = accuracy([evaluate(graph, x)], [evaluate(low, x)])
    assert acc["max_rel_error"] < 5e-2 and acc["top1"] == 1.0
    dynamic = lower_precision(graph, "int8-dynamic")  # linear layers only
    assert [n.inputs[0].dtype for n in dynamic.nodes if n.op == "conv2d"] == ["float32"] * 2
    assert [n.output.dtype for n in dynamic.nodes if n.op == "matmul"] == ["int32"]


def test_the_conv_integer_part_is_exact_against_numpy():
    graph = cnn(N=1)
    cal = [(_x(1, 3, 16, 16),)]
    low = lower_precision(graph, "int8", calibration=cal)
    x = cal[0][0]
    first = next(n for n in low.nodes if n.op == "conv2d")
    got = _values(low, [first.name], x)[0]
    scale, zp = _range_params(x.min(), x.max())
    q = _quantize(x, scale, zp) - zp
    w = first.inputs[1].data.astype(np.int64)
    qp = np.pad(q, ((0, 0), (0, 0), (1, 1), (1, 1)))  # padding x with 0 is padding q - zp with 0
    want = np.zeros((1, 8, 16, 16), np.int64)
    for r in range(3):
        for s in range(3):
            want += np.einsum("nchw,kc->nkhw", qp[:, :, r:r + 16, s:s + 16], w[:, :, r, s])
    np.testing.assert_array_equal(got, want)


def test_int8_needs_calibration_and_bad_calibration_sets_are_refused_by_name():
    graph = mlp()
    x = _x(16, 64)
    with pytest.raises(GraphError, match="precision='int8' quantizes activations with ranges "
                                         "calibrated.*'int8-dynamic', which needs none"):
        compile_model(graph, precision="int8")
    with pytest.raises(GraphError, match="calibration is empty"):
        compile_model(graph, precision="int8", calibration=[])
    with pytest.raises(GraphError, match=r"example 0: input x must have shape \(16, 64\), got "
                                         r"\(3, 64\)"):
        lower_precision(graph, "int8", calibration=[(x[:3],)])
    bad = x.copy()
    bad[1, 2] = np.nan
    with pytest.raises(GraphError, match="example 1: input x holds NaN"):
        compile_model(graph, precision="int8", calibration=[(x,), (bad,)])
    # finite inputs, an activation that overflows: named too
    with pytest.raises(GraphError, match="example 0: %relu, which a quantized layer reads, is "
                                         "not finite"):
        lower_precision(graph, "int8", calibration=[(np.full((16, 64), 3e38, np.float32),)])
    from looptune.graph import tune_model
    with pytest.raises(GraphError, match="precision='int8' quantizes"):
        tune_model(graph, max_trials_global=4, precision="int8")


# ------------------------------------------------------------------ compiled
@pytest.mark.cc
@pytest.mark.parametrize("model,precision", [("mlp", "int8"), ("mlp", "int8-dynamic"),
                                             ("cnn", "int8"), ("cnn", "int8-dynamic")])
def test_an_int8_compile_reports_its_error_against_float32(model, precision, capsys):
    graph = mlp() if model == "mlp" else cnn()
    shape = graph.inputs[0].shape
    cal = [(_x(*shape),) for _ in range(4)]
    m = compile_model(graph, None, "cpu", num_threads=1, precision=precision, calibration=cal)
    printed = capsys.readouterr().out
    assert f"precision {precision}: max error" in printed and "on 4 input(s), top-1" in printed
    assert m.precision == precision and 0 < m.accuracy["max_rel_error"] < 5e-2
    assert m.accuracy["top1"] >= 0.9
    low = lower_precision(graph, precision, calibration=cal)
    x = _x(*shape)
    got = m(x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    want = evaluate(low, x)[0]  # the compiled model computes the rewritten graph
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < 1e-3
    ref = evaluate(graph, x)[0]
    assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) < 5e-2


@pytest.mark.cc
def test_run_an_onnx_model_in_int8_with_a_calibration_file(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    from test_frontend_onnx import mlp_gemm
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_gemm()[0], str(path))
    npz = tmp_path / "x.npz"
    np.savez(npz, x=_x(8, 2, 16))  # 8 examples of the (2, 16) input
    assert main(["run", str(path), "--precision", "int8", "--calibration", str(npz)]) == 0
    out = capsys.readouterr().out
    assert "precision int8: max error" in out and "on 8 input(s), top-1 agreement" in out
    assert "latency:" in out
    assert main(["run", str(path), "--precision", "int8-dynamic"]) == 0
    assert "latency:" in capsys.readouterr().out
    assert main(["run", str(path), "--precision", "int8"]) == 2
    assert "--calibration NPZ" in capsys.readouterr().err
    np.savez(npz, x=np.full((2, 2, 16), np.nan, np.float32))
    assert main(["run", str(path), "--precision", "int8", "--calibration", str(npz)]) == 2
    assert "example 0: input x holds NaN" in capsys.readouterr().err
    np.savez(npz, x=np.zeros((0, 2, 16), np.float32))
    assert main(["run", str(path), "--precision", "int8", "--calibration", str(npz)]) == 2
    assert "x holds 0 examples" in capsys.readouterr().err


@pytest.mark.cc
@pytest.mark.slow
def test_tune_model_in_int8_from_the_command_line(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    from test_frontend_onnx import mlp_gemm
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_gemm()[0], str(path))
    npz = tmp_path / "x.npz"
    np.savez(npz, x=_x(4, 2, 16))
    rc = main(["tune-model", str(path), "--trials", "8", "--per-iter", "4", "--work-dir",
               str(tmp_path / "w"), "--quiet", "--precision", "int8", "--calibration", str(npz)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("precision int8: max error") == 1 and "end to end:" in out
