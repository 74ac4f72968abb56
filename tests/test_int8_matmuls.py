"""Quantized matmuls on the int8 units (graph/quantized.py): what the ONNX importer computes in
int32 is rewritten to u8 x s8 with a compensation, and stays bit for bit what ONNX Runtime
computes: dynamic quantization (a zero point computed per call) and static QLinearMatMul
with int8 and uint8 activations."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune.graph.simplify import prepare

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(3)


def _save(tmp_path, nodes, inputs, outputs, inits, name="m.onnx"):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    path = tmp_path / name
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def _ort(path, feeds):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def _matmuls_8bit(graph) -> list:
    return [(n.inputs[0].dtype, n.inputs[1].dtype) for n in prepare(graph).nodes
            if n.op == "matmul"]


@pytest.mark.cc
def test_a_dynamically_quantized_mlp_runs_u8_by_s8_and_matches_onnx_runtime(tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    T, D, F = 32, 64, 96
    w1 = numpy_helper.from_array(RNG.normal(0, 0.1, (D, F)).astype("float32"), "w1")
    w2 = numpy_helper.from_array(RNG.normal(0, 0.1, (F, D)).astype("float32"), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    fp32 = _save(tmp_path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, D])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [T, D])], [w1, w2],
                 "fp32.onnx")
    q = str(tmp_path / "q.onnx")
    quantize_dynamic(fp32, q, weight_type=QuantType.QInt8)
    graph = lt.from_onnx(q)
    assert _matmuls_8bit(graph) == [("uint8", "int8"), ("uint8", "int8")]
    m = lt.compile_model(graph, None, "cpu", num_threads=1)
    for _ in range(3):
        x = RNG.normal(0, 1, (T, D)).astype("float32")
        got = m(x)
        got = got[0] if isinstance(got, (list, tuple)) else got
        np.testing.assert_array_equal(got, _ort(q, {"x": x})[0])


@pytest.mark.cc
@pytest.mark.parametrize("act", [TensorProto.INT8, TensorProto.UINT8])
def test_integer_matmuls_of_signed_or_unsigned_activations_are_bit_exact(tmp_path, act):
    """MatMulInteger of a quantized activation (int8: shifted by 128 into the units' u8, the
    shift compensated) and QLinearMatMul (uint8, as ONNX Runtime runs it)."""
    M, K, N = 8, 64, 32  # K: a whole number of VNNI groups and AMX steps
    np_act = np.int8 if act == TensorProto.INT8 else np.uint8
    w = RNG.integers(-128, 128, (K, N)).astype(np.int8)
    za = np.array(-7 if act == TensorProto.INT8 else 131, np_act)
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array(0.05, np.float32), "sa"),
             numpy_helper.from_array(za, "za"),
             numpy_helper.from_array(np.array(0.02, np.float32), "sw"),
             numpy_helper.from_array(np.array(0, np.int8), "zw"),
             numpy_helper.from_array(np.array(3.0, np.float32), "sy"),
             numpy_helper.from_array(np.array(10, np.uint8), "zy")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sa", "za"], ["a"])]
    if act == TensorProto.INT8:
        nodes.append(helper.make_node("MatMulInteger", ["a", "w", "za", "zw"], ["y"]))
        out = helper.make_tensor_value_info("y", TensorProto.INT32, [M, N])
    else:
        nodes.append(helper.make_node("QLinearMatMul", ["a", "sa", "za", "w", "sw", "zw", "sy",
                                                        "zy"], ["y"]))
        out = helper.make_tensor_value_info("y", TensorProto.UINT8, [M, N])
    path = _save(tmp_path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                 [M, K])], [out], inits)
    graph = lt.from_onnx(path)
    assert _matmuls_8bit(graph) == [("uint8", "int8")]
    m = lt.compile_model(graph, None, "cpu", num_threads=1)
    x = RNG.normal(0, 4, (M, K)).astype("float32")
    x[0], x[1] = -100.0, 100.0  # saturated: the type's extremes
    got = m(x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_array_equal(got, _ort(path, {"x": x})[0])


@pytest.mark.cc
def test_an_int8_matmuls_epilogue_is_vector_code():
    """The default schedule writes the unit's accumulator tile back through a vectorized
    loop: a GELU epilogue's tanh is vector math, not a libm call per element."""
    from looptune.dlight import default_schedule
    from looptune.graph.ir import GraphBuilder
    from looptune.graph.tasks import extract_tasks
    g = GraphBuilder("gelu")
    x = g.input("x", (64, 128), "float32")
    q = g.op("cast", g.op("clip", g.op("round", x, name="r"), name="c", min=0.0, max=255.0),
             name="q", dtype="int32")
    w = g.const("w", RNG.integers(-127, 128, (128, 64)).astype(np.int32))
    y = g.op("mul", g.op("cast", g.op("matmul", q, w, name="mm"), name="f", dtype="float32"),
             name="s", scalar=1e-4)
    graph = g.finish(g.op("gelu", y, name="gelu", approximate="tanh"))
    task = [t for t in extract_tasks(graph) if "matmul" in t.task_name][0]
    trace = default_schedule(task.func, lt.Target.create("cpu")).trace.as_python()
    if "tensorize" not in trace:
        pytest.skip("no int8 unit on this machine")
    m = lt.compile_model(graph, None, "cpu", num_threads=1)
    x = RNG.uniform(0, 255, (64, 128)).astype(np.float32)
    from looptune.graph import evaluate
    np.testing.assert_allclose(m(x), evaluate(graph, x)[0], rtol=1e-5, atol=1e-5)
    assert "vectorize" in trace.split("tensorize")[-1]


@pytest.mark.cc
def test_a_whole_tensor_min_is_a_vector_reduction_and_nan_still_wins():
    """A dynamic quantization's range (min and max of the whole activation) reduces in vector
    partials (rfactor), not one scalar chain; a NaN anywhere still makes it NaN."""
    from looptune.dlight import default_schedule
    from looptune.graph import evaluate
    from looptune.graph.ir import GraphBuilder
    from looptune.graph.tasks import extract_tasks
    g = GraphBuilder("range")
    x = g.input("x", (1, 64, 256), "float32")
    lo = g.op("minimum", g.op("min", x, name="min", axis=(0, 1, 2), keepdims=False),
              name="lo", scalar=0.0)
    graph = g.finish(lo)
    (task,) = extract_tasks(graph)
    assert "rfactor" in default_schedule(task.func, lt.Target.create("cpu")).trace.as_python()
    m = lt.compile_model(graph, None, "cpu", num_threads=1)
    a = RNG.normal(0, 1, (1, 64, 256)).astype(np.float32)
    a[0, 40, 3] = -77.0
    np.testing.assert_array_equal(m(a), evaluate(graph, a)[0])
    a[0, 9, 200] = np.nan
    assert np.isnan(m(a)).all()
