"""The ONNX importer: models built with onnx.helper, checked against ONNX Runtime (or the
numpy reference of each operator when onnxruntime is not installed)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from looptune.frontend.common import ImportError_  # noqa: E402
from looptune.frontend.onnx import from_onnx  # noqa: E402
from looptune.graph import evaluate  # noqa: E402
from looptune.graph.fuse import fuse  # noqa: E402

RNG = np.random.default_rng(11)


def rand(*shape):
    return RNG.uniform(-1, 1, shape).astype("float32")


def model(nodes, inputs, outputs, inits=(), opset=17):
    """inputs/outputs: [(name, shape, elem_type)]; inits: {name: array}."""
    g = helper.make_graph(
        nodes, "m",
        [helper.make_tensor_value_info(n, t, s) for n, s, t in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, s, t in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in dict(inits).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


F = TensorProto.FLOAT
I64 = TensorProto.INT64


def run_ort(m, feeds):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def conv_bn_relu():
    w, b = rand(6, 4, 3, 3), rand(6)
    stats = {"s": rand(6) + 1.5, "t": rand(6), "m": rand(6), "v": rand(6) + 1.5}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "t", "m", "v"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    return model(nodes, [("x", [1, 4, 8, 8], F)], [("y", None, F)],
                 {"w": w, "b": b, **stats}), {"x": rand(1, 4, 8, 8)}


def mlp_gemm():
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    return model(nodes, [("x", [2, 16], F)], [("y", None, F)],
                 {"w1": rand(8, 16), "b1": rand(8), "w2": rand(8, 3)}), {"x": rand(2, 16)}


def attention_like():
    """MatMul on 4-D, Softmax, Transpose, Reshape with a shape initializer, LayerNorm, GELU
    written out with Erf (as exporters emit it), Add of a residual."""
    nodes = [
        helper.make_node("Reshape", ["x", "shp"], ["q"]),
        helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["q"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["qt", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "qt"], ["o"]),
        helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ot", "shp2"], ["o2"]),
        helper.make_node("Add", ["o2", "x"], ["res"]),
        helper.make_node("LayerNormalization", ["res", "g", "b"], ["ln"], axis=-1),
        helper.make_node("Div", ["ln", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["ln", "e1"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"]),
    ]
    inits = {"shp": np.array([1, 6, 2, 4], np.int64), "shp2": np.array([1, 6, 8], np.int64),
             "scale": np.array(0.5, np.float32), "g": rand(8) + 1, "b": rand(8),
             "sqrt2": np.array(np.sqrt(2), np.float32), "one": np.array(1.0, np.float32),
             "half": np.array(0.5, np.float32)}
    return model(nodes, [("x", [1, 6, 8], F)], [("y", None, F)], inits), {"x": rand(1, 6, 8)}


def pools_and_shapes():
    nodes = [
        helper.make_node("MaxPool", ["x"], ["mp"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["mp"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["x"], ["gp"]),
        helper.make_node("Flatten", ["ap"], ["f1"], axis=1),
        helper.make_node("Flatten", ["gp"], ["f2"], axis=1),
        helper.make_node("Concat", ["f1", "f2"], ["cat"], axis=1),
        helper.make_node("Slice", ["cat", "st", "en", "ax"], ["sl"]),
        helper.make_node("Unsqueeze", ["sl", "ax0"], ["u"]),
        helper.make_node("Sigmoid", ["u"], ["sg"]),
        helper.make_node("ReduceMean", ["sg", "ax2"], ["y"], keepdims=0),
    ]
    inits = {"st": np.array([1], np.int64), "en": np.array([15], np.int64),
             "ax": np.array([1], np.int64), "ax0": np.array([0], np.int64),
             "ax2": np.array([2], np.int64)}
    return model(nodes, [("x", [1, 4, 8, 8], F)], [("y", None, F)], inits, opset=18), \
        {"x": rand(1, 4, 8, 8)}


def embedding():
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
             helper.make_node("ReduceSum", ["e", "ax"], ["y"], keepdims=1)]
    return model(nodes, [("ids", [2, 3], I64)], [("y", None, F)],
                 {"table": rand(10, 4), "ax": np.array([1], np.int64)}), \
        {"ids": np.array([[1, 9, 3], [0, 0, 7]], np.int64)}


def depthwise_same():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], group=4, auto_pad="SAME_UPPER",
                              strides=[2, 2]),
             helper.make_node("Tanh", ["c"], ["y"])]
    return model(nodes, [("x", [1, 4, 9, 9], F)], [("y", None, F)], {"w": rand(4, 1, 3, 3)}), \
        {"x": rand(1, 4, 9, 9)}


MODELS = {f.__name__: f for f in (conv_bn_relu, mlp_gemm, attention_like, pools_and_shapes,
                                   embedding, depthwise_same)}


def feeds_for_graph(feeds):
    return [v.astype("int32") if v.dtype == np.int64 else v for v in feeds.values()]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_imported_models_match_onnx_runtime(name):
    m, feeds = MODELS[name]()
    want = run_ort(m, feeds)
    graph = from_onnx(m)
    for got, w in zip(evaluate(graph, *feeds_for_graph(feeds)), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)


@pytest.mark.cc
@pytest.mark.parametrize("name", sorted(MODELS))
def test_imported_models_run_as_kernels(name):
    from test_graph import run_kernels
    m, feeds = MODELS[name]()
    graph = from_onnx(m)
    want = evaluate(graph, *feeds_for_graph(feeds))
    for got, w in zip(run_kernels(graph, *feeds_for_graph(feeds)), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-3, atol=1e-4)


def test_batch_norm_folds_and_fuses():
    graph = from_onnx(conv_bn_relu()[0])
    assert [n.op for n in graph.nodes] == ["conv2d", "add", "relu"]
    assert [g.name for g in fuse(graph)] == ["fused_conv2d_add_relu"]


def test_unsupported_operator_and_dynamic_shapes_get_clear_errors():
    m = model([helper.make_node("CumSum", ["x", "ax"], ["y"])], [("x", [3], F)],
              [("y", None, F)], {"ax": np.array(0, np.int64)})
    with pytest.raises(ImportError_, match=r"ONNX operator CumSum \(node y\) is not supported"):
        from_onnx(m)
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", ["batch", 3], F)],
              [("y", None, F)])
    with pytest.raises(ImportError_, match="dynamic dimension .batch.*static shapes"):
        from_onnx(m)
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", [3], F)], [("y", None, F)],
              opset=11)
    with pytest.raises(ImportError_, match="opset 11.*13 and above"):
        from_onnx(m)
