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
    ops = [helper.make_opsetid("", opset)]
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = helper.find_min_ir_version_for(ops)
    return m


F = TensorProto.FLOAT
I64 = TensorProto.INT64
B = TensorProto.BOOL


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


def test_unsupported_operator_and_dynamic_shapes_get_clear_errors(tmp_path):
    m = model([helper.make_node("Det", ["x"], ["y"])], [("x", [3, 3], F)], [("y", None, F)])
    with pytest.raises(ImportError_, match=r"1 node\(s\) of 1 ONNX operator.*\n  Det x1 "
                                           r"\(e.g. node y\)"):
        from_onnx(m)
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", ["batch", 3], F)],
              [("y", None, F)])
    with pytest.raises(ImportError_, match="dynamic dimension .batch.*static shapes"):
        from_onnx(m)
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", [3], F)], [("y", None, F)],
              opset=11)
    with pytest.raises(ImportError_, match="opset 11.*13 and above"):
        from_onnx(m)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ImportError_, match="holds no ONNX model.*no opset"):
        from_onnx(empty)


def test_every_unsupported_operator_is_named_in_one_error():
    """Two unsupported operators (one twice), a refused Pad mode and a refused output, with
    supported nodes between and after them: one error names all four, with counts and a node
    each."""
    nodes = [helper.make_node("Det", ["x"], ["d"]),
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Hardmax", ["r"], ["h"]),
             helper.make_node("Add", ["h", "r"], ["a"]),
             helper.make_node("Pad", ["a", "pads"], ["p"], mode="reflect"),
             helper.make_node("Hardmax", ["p"], ["h2"]),
             helper.make_node("LayerNormalization", ["x", "g"], ["ln", "lnmean"]),
             helper.make_node("Add", ["ln", "lnmean"], ["lnm"]),
             helper.make_node("Unsqueeze", ["d", "ax"], ["du"]),
             helper.make_node("Add", ["h2", "du"], ["y"])]
    m = model(nodes, [("x", [3, 3], F)], [("y", None, F), ("lnm", None, F)],
              {"pads": np.array([0, 1, 0, 1], np.int64), "ax": np.array([0, 1], np.int64),
               "g": rand(3)})
    with pytest.raises(ImportError_) as info:
        from_onnx(m)
    text = str(info.value)
    assert "5 node(s) of 4 ONNX operator(s)" in text
    assert "Hardmax x2 (e.g. node h)" in text and "Det x1 (e.g. node d)" in text
    assert "Pad x1 (e.g. node p): Pad mode 'reflect' is not supported" in text
    assert "LayerNormalization x1 (e.g. node ln): LayerNormalization's Mean and InvStdDev " \
           "outputs are not supported" in text
    assert set(info.value.problems) == {"Det", "Hardmax", "Pad", "LayerNormalization"}


# ------------------------------------------------------------------ one model per handler
def check(m, feeds, rtol=1e-4, atol=1e-5):
    """looptune's import (numpy references) matches ONNX Runtime on every output."""
    want = run_ort(m, feeds)
    got = evaluate(from_onnx(m), *feeds_for_graph(feeds))
    for g, w in zip(got, want, strict=True):
        assert np.shape(g) == np.shape(w) or np.size(g) == np.size(w) == 1
        np.testing.assert_allclose(np.asarray(g, np.float64).reshape(np.shape(w)),
                                   np.asarray(w, np.float64), rtol=rtol, atol=atol)


def masks_and_compares():
    x = rand(2, 3, 4)
    x[0, 0, :2] = np.nan
    nodes = [helper.make_node("IsNaN", ["x"], ["nan"]),
             helper.make_node("Not", ["nan"], ["ok"]),
             helper.make_node("Greater", ["x", "zero"], ["pos"]),
             helper.make_node("LessOrEqual", ["x", "t"], ["le"]),
             helper.make_node("And", ["ok", "pos"], ["okpos"]),
             helper.make_node("Or", ["okpos", "le"], ["any"]),
             helper.make_node("Where", ["okpos", "x", "neg"], ["w"]),
             helper.make_node("Where", ["nan", "zero", "w"], ["y"]),
             helper.make_node("Equal", ["x", "x"], ["eq"]),
             helper.make_node("Less", ["half", "x"], ["lt"]),
             helper.make_node("GreaterOrEqual", ["x", "t"], ["ge"]),
             helper.make_node("Cast", ["any"], ["anyf"], to=F)]
    inits = {"zero": np.array(0, np.float32), "t": rand(4), "half": np.array(0.5, np.float32),
             "neg": np.array([-1.0], np.float32)}
    outs = [("y", None, F), ("eq", None, B), ("lt", None, B), ("ge", None, B),
            ("anyf", None, F)]
    return model(nodes, [("x", [2, 3, 4], F)], outs, inits), {"x": x}


def activations():
    nodes = [helper.make_node("Clip", ["x", "zero", "six"], ["relu6"]),
             helper.make_node("Clip", ["x", "", "half"], ["upper"]),
             helper.make_node("Clip", ["x"], ["nobounds"]),
             helper.make_node("HardSwish", ["x"], ["hs"]),
             helper.make_node("HardSigmoid", ["x"], ["hsig"], alpha=0.3, beta=0.4),
             helper.make_node("Abs", ["x"], ["ab"]),
             helper.make_node("Add", ["ab", "half"], ["ab1"]),
             helper.make_node("Reciprocal", ["ab1"], ["rec"]),
             helper.make_node("Sqrt", ["ab1"], ["sq"]),
             helper.make_node("Pow", ["x", "three"], ["cube"]),
             helper.make_node("Pow", ["x", "two"], ["square"]),
             helper.make_node("Pow", ["ab1", "x"], ["powt"]),
             helper.make_node("Erf", ["x"], ["erf"]),
             helper.make_node("LeakyRelu", ["x"], ["lr"], alpha=0.2),
             helper.make_node("Max", ["x", "hs", "zero"], ["mx"]),
             helper.make_node("Min", ["x", "hsig"], ["mn"])]
    inits = {"zero": np.array(0, np.float32), "six": np.array(6, np.float32),
             "half": np.array(0.5, np.float32), "three": np.array(3, np.float32),
             "two": np.array(2, np.float32)}
    outs = [(o, None, F) for o in ("relu6", "upper", "nobounds", "hs", "hsig", "rec", "sq",
                                   "cube", "square", "powt", "erf", "lr", "mx", "mn")]
    return model(nodes, [("x", [2, 8], F)], outs, inits), {"x": rand(2, 8) * 8}


def einsums():
    nodes = [helper.make_node("Einsum", ["q", "k"], ["scores"], equation="bhqd,bhkd->bhqk"),
             helper.make_node("Einsum", ["q", "w"], ["proj"], equation="...d,de->...e"),
             helper.make_node("Einsum", ["q", "k"], ["outer"], equation="bhqd,bhkd->hqk"),
             helper.make_node("Einsum", ["w", "v"], ["implicit"], equation="de,e"),
             helper.make_node("Einsum", ["q"], ["perm"], equation="bhqd->bdqh"),
             helper.make_node("Einsum", ["q"], ["total"], equation="bhqd->q")]
    outs = [(o, None, F) for o in ("scores", "proj", "outer", "implicit", "perm", "total")]
    return model(nodes, [("q", [2, 3, 4, 5], F), ("k", [2, 3, 6, 5], F)], outs,
                 {"w": rand(5, 7), "v": rand(7)}), {"q": rand(2, 3, 4, 5), "k": rand(2, 3, 6, 5)}


def gathers():
    nodes = [helper.make_node("Gather", ["x", "i0"], ["g0"], axis=1),        # a scalar: a slice
             helper.make_node("Gather", ["x", "iw"], ["g1"], axis=-1),       # wrapped, any order
             helper.make_node("Gather", ["x", "ids"], ["g2"], axis=2),       # runtime indices
             helper.make_node("Gather", ["x", "ir"], ["g3"], axis=1),        # a strided range
             helper.make_node("GatherElements", ["x", "ge"], ["g4"], axis=1),
             helper.make_node("GatherElements", ["x", "gc"], ["g5"], axis=-1)]
    inits = {"i0": np.array(-1, np.int64), "iw": np.array([[2, -1], [0, 0]], np.int64),
             "ir": np.array([0, 2], np.int64),
             "gc": RNG.integers(-4, 4, (2, 3, 2)).astype(np.int64)}
    outs = [(o, None, F) for o in ("g0", "g1", "g2", "g3", "g4", "g5")]
    feeds = {"x": rand(2, 3, 4), "ids": np.array([3, 0, 3], np.int64),
             "ge": RNG.integers(0, 3, (2, 2, 4)).astype(np.int64)}
    return model(nodes, [("x", [2, 3, 4], F), ("ids", [3], I64), ("ge", [2, 2, 4], I64)],
                 outs, inits), feeds


def splits_13():
    nodes = [helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=1),
             helper.make_node("Split", ["x"], ["c", "d", "e"], axis=-1)]
    outs = [(o, None, F) for o in "abcde"]
    return model(nodes, [("x", [2, 5, 6], F)], outs, {"sizes": np.array([1, 4], np.int64)},
                 opset=13), {"x": rand(2, 5, 6)}


def splits_18():
    nodes = [helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3),
             helper.make_node("Split", ["x", "sizes"], ["d", "e"], axis=2)]
    outs = [(o, None, F) for o in "abcde"]
    return model(nodes, [("x", [2, 5, 6], F)], outs, {"sizes": np.array([4, 2], np.int64)},
                 opset=18), {"x": rand(2, 5, 6)}


def conv1d_and_pools1d():
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[2, 1], strides=[2],
                              dilations=[2], group=2),
             helper.make_node("BatchNormalization", ["c", "s", "t", "m", "v"], ["n"]),
             helper.make_node("MaxPool", ["n"], ["mp"], kernel_shape=[3], strides=[2],
                              ceil_mode=1),
             helper.make_node("AveragePool", ["n"], ["ap"], kernel_shape=[4], strides=[3],
                              pads=[1, 2]),
             helper.make_node("GlobalMaxPool", ["n"], ["gm"])]
    inits = {"w": rand(6, 2, 3), "b": rand(6), "s": rand(6) + 1.5, "t": rand(6), "m": rand(6),
             "v": rand(6) + 1.5}
    outs = [(o, None, F) for o in ("mp", "ap", "gm")]
    return model(nodes, [("x", [1, 4, 20], F)], outs, inits), {"x": rand(1, 4, 20)}


def conv_transposes():
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["up"], strides=[2, 2],
                              pads=[1, 0, 1, 2], output_padding=[1, 0], group=2,
                              dilations=[1, 2]),
             helper.make_node("ConvTranspose", ["x", "w1"], ["same"], pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["x", "flat"], ["x1"]),
             helper.make_node("ConvTranspose", ["x1", "w2"], ["up1"], strides=[3], pads=[2, 0])]
    inits = {"w": rand(4, 3, 3, 3), "b": rand(6), "w1": rand(4, 5, 3, 3), "w2": rand(4, 2, 4),
             "flat": np.array([1, 4, 35], np.int64)}
    outs = [(o, None, F) for o in ("up", "same", "up1")]
    return model(nodes, [("x", [1, 4, 5, 7], F)], outs, inits), {"x": rand(1, 4, 5, 7)}


def pools_ceil_and_pads():
    nodes = [helper.make_node("MaxPool", ["x"], ["mp"], kernel_shape=[3, 3], strides=[2, 2],
                              ceil_mode=1),
             helper.make_node("MaxPool", ["x"], ["mp2"], kernel_shape=[2, 3], strides=[2, 1],
                              pads=[0, 1, 1, 1]),
             helper.make_node("AveragePool", ["x"], ["ap"], kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
             helper.make_node("AveragePool", ["x"], ["ap2"], kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1,
                              ceil_mode=1),
             helper.make_node("AveragePool", ["x"], ["ap3"], kernel_shape=[2, 2],
                              auto_pad="SAME_UPPER"),
             helper.make_node("GlobalMaxPool", ["x"], ["gm"])]
    outs = [(o, None, F) for o in ("mp", "mp2", "ap", "ap2", "ap3", "gm")]
    return model(nodes, [("x", [1, 2, 8, 9], F)], outs, opset=19), {"x": rand(1, 2, 8, 9)}


def reductions_18():
    nodes = [helper.make_node("ReduceMean", ["x", "a12"], ["mean"]),
             helper.make_node("ReduceSum", ["x", "a0"], ["sum"], keepdims=0),
             helper.make_node("ReduceMax", ["x"], ["max"], keepdims=0),
             helper.make_node("ReduceMin", ["x", "a12"], ["min"]),
             helper.make_node("ReduceSum", ["x", "none"], ["same"], noop_with_empty_axes=1),
             helper.make_node("ReduceL2", ["x", "a12"], ["l2"]),
             helper.make_node("ReduceSumSquare", ["x", "a0"], ["ss"], keepdims=0)]
    inits = {"a12": np.array([-1, 1], np.int64), "a0": np.array([0], np.int64),
             "none": np.zeros(0, np.int64)}
    outs = [(o, None, F) for o in ("mean", "sum", "max", "min", "same", "l2", "ss")]
    return model(nodes, [("x", [2, 3, 4], F)], outs, inits, opset=18), {"x": rand(2, 3, 4)}


def softmax_norms():
    nodes = [helper.make_node("Softmax", ["x"], ["sm"], axis=1),
             helper.make_node("LogSoftmax", ["x"], ["lsm"], axis=0),
             helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-2,
                              epsilon=1e-3),
             helper.make_node("InstanceNormalization", ["x", "s", "t"], ["inn"]),
             helper.make_node("GroupNormalization", ["x", "s", "t"], ["gn"], num_groups=1)]
    inits = {"g": rand(3, 4) + 1, "b": rand(3, 4), "s": rand(3) + 1, "t": rand(3)}
    outs = [(o, None, F) for o in ("sm", "lsm", "ln", "inn", "gn")]
    return model(nodes, [("x", [2, 3, 4], F)], outs, inits, opset=21), {"x": rand(2, 3, 4)}


def rms_norms():
    """RMSNormalization (opset 23) and ONNX Runtime's SimplifiedLayerNormalization."""
    nodes = [helper.make_node("RMSNormalization", ["x", "g"], ["rms"], epsilon=1e-3),
             helper.make_node("SimplifiedLayerNormalization", ["x", "g2"], ["sln"], axis=-2)]
    outs = [(o, None, F) for o in ("rms", "sln")]
    return model(nodes, [("x", [2, 3, 8], F)], outs, {"g": rand(8), "g2": rand(3, 8)},
                 opset=23), {"x": rand(2, 3, 8)}


def shapes_and_copies():
    """Shape arithmetic on runtime tensors (Shape with start/end, Size, Concat, Reshape),
    Expand, Tile, Squeeze/Unsqueeze with axes inputs, Pad with a value and axes, Cast, CumSum,
    a Trilu of a runtime tensor."""
    nodes = [helper.make_node("Shape", ["x"], ["sh"], start=1),
             helper.make_node("Shape", ["x"], ["s0"], end=1),
             helper.make_node("Concat", ["s0", "minus1"], ["tgt"], axis=0),
             helper.make_node("Reshape", ["x", "tgt"], ["flat"]),
             helper.make_node("Size", ["x"], ["n"]),
             helper.make_node("Cast", ["n"], ["nf"], to=F),
             helper.make_node("Div", ["flat", "nf"], ["scaled"]),
             helper.make_node("Unsqueeze", ["scaled", "ax1"], ["u"]),
             helper.make_node("Expand", ["u", "eshape"], ["ex"]),
             helper.make_node("Squeeze", ["col", "ax1"], ["sq"]),
             helper.make_node("Tile", ["sq", "reps"], ["tl"]),
             helper.make_node("Pad", ["x", "pads", "val", "pax"], ["pd"], mode="constant"),
             helper.make_node("Cast", ["x"], ["xi"], to=I64),
             helper.make_node("CumSum", ["xi", "ax1"], ["cs"], exclusive=1),
             helper.make_node("CumSum", ["x", "ax0"], ["cf"], reverse=1),
             helper.make_node("Trilu", ["x"], ["tri"], upper=0),
             helper.make_node("Concat", ["x", "x"], ["cat"], axis=-1),
             helper.make_node("Slice", ["cat", "st", "en", "ax2", "step"], ["sl"])]
    inits = {"minus1": np.array([-1], np.int64), "ax1": np.array([1], np.int64),
             "ax0": np.array(0, np.int64), "ax2": np.array([2, 1], np.int64),
             "eshape": np.array([2, 3, 1], np.int64), "reps": np.array([2], np.int64),
             "col": rand(3, 1), "pads": np.array([1, 0, 2, 3], np.int64),
             "val": np.array(0.25, np.float32), "pax": np.array([2, 0], np.int64),
             "st": np.array([-1, 2], np.int64), "en": np.array([-100, 0], np.int64),
             "step": np.array([-2, -1], np.int64)}
    outs = [("ex", None, F), ("tl", None, F), ("pd", None, F), ("cs", None, I64),
            ("cf", None, F), ("tri", None, F), ("sl", None, F), ("sh", None, I64)]
    return model(nodes, [("x", [2, 3, 4], F)], outs, inits, opset=18), \
        {"x": rand(2, 3, 4) * 4}


def resize_and_matmul():
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["near"], mode="nearest"),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["lin"], mode="linear"),
             helper.make_node("Resize", ["x", "", "odd"], ["torch_nearest"], mode="nearest",
                              coordinate_transformation_mode="asymmetric",
                              nearest_mode="floor"),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["corners"], mode="linear",
                              coordinate_transformation_mode="align_corners"),
             helper.make_node("Resize", ["x", "", "odd"], ["bilinear"], mode="linear",
                              coordinate_transformation_mode="pytorch_half_pixel"),
             helper.make_node("MatMul", ["x", "y"], ["mm"])]
    inits = {"scales": np.array([1, 1, 2, 2], np.float32),
             "odd": np.array([1, 1, 1.5, 0.75], np.float32),
             "sizes": np.array([1, 2, 5, 7], np.int64)}
    outs = [(o, None, F) for o in ("near", "lin", "torch_nearest", "corners", "bilinear", "mm")]
    return model(nodes, [("x", [1, 2, 4, 6], F), ("y", [3, 1, 6, 2], F)], outs, inits), \
        {"x": rand(1, 2, 4, 6), "y": rand(3, 1, 6, 2)}


def composed_activations_and_blocks():
    """Operators written with others: Selu, Celu, Softsign, PRelu, ThresholdedRelu, Mean,
    DepthToSpace (both modes), SpaceToDepth."""
    nodes = [helper.make_node("Selu", ["x"], ["selu"]),
             helper.make_node("Celu", ["x"], ["celu"], alpha=0.7),
             helper.make_node("Softsign", ["x"], ["softsign"]),
             helper.make_node("PRelu", ["x", "slope"], ["prelu"]),
             helper.make_node("ThresholdedRelu", ["x"], ["trelu"], alpha=0.3),
             helper.make_node("Mean", ["x", "selu", "celu"], ["mean"]),
             helper.make_node("DepthToSpace", ["x"], ["dcr"], blocksize=2),
             helper.make_node("DepthToSpace", ["x"], ["crd"], blocksize=2, mode="CRD"),
             helper.make_node("SpaceToDepth", ["x"], ["s2d"], blocksize=3)]
    outs = [(o, None, F) for o in ("selu", "celu", "softsign", "prelu", "trelu", "mean", "dcr",
                                   "crd", "s2d")]
    return model(nodes, [("x", [1, 8, 3, 6], F)], outs, {"slope": rand(8, 1, 1)}), \
        {"x": rand(1, 8, 3, 6) * 3}


HANDLER_MODELS = {f.__name__: f for f in (
    masks_and_compares, activations, composed_activations_and_blocks, einsums, gathers,
    splits_13, splits_18, conv1d_and_pools1d, conv_transposes, pools_ceil_and_pads,
    reductions_18, softmax_norms, rms_norms, shapes_and_copies, resize_and_matmul)}


@pytest.mark.parametrize("name", sorted(HANDLER_MODELS))
def test_handlers_match_onnx_runtime(name):
    check(*HANDLER_MODELS[name]())


@pytest.mark.cc
@pytest.mark.parametrize("name", [
    "conv1d_and_pools1d", "conv_transposes", "pools_ceil_and_pads", "gathers", "einsums",
    "shapes_and_copies", "resize_and_matmul", "composed_activations_and_blocks",
    "masks_and_compares"])
def test_handler_models_run_as_kernels(name):
    from test_graph import run_kernels
    m, feeds = HANDLER_MODELS[name]()
    graph = from_onnx(m)
    want = evaluate(graph, *feeds_for_graph(feeds))
    for got, w in zip(run_kernels(graph, *feeds_for_graph(feeds)), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)


def test_constant_subgraphs_fold_whatever_computes_them():
    """A causal mask built from Range, ConstantOfShape, Trilu, Where, IsNaN, Expand and an
    operator with no translation (Det) computes at import: one add node remains."""
    nodes = [helper.make_node("Range", ["zero", "four", "one"], ["r"]),
             helper.make_node("ConstantOfShape", ["shape"], ["ones"],
                              value=numpy_helper.from_array(np.array([1.0], np.float32))),
             helper.make_node("Trilu", ["ones"], ["tri"], upper=0),
             helper.make_node("IsNaN", ["tri"], ["nan"]),
             helper.make_node("Equal", ["tri", "zerof"], ["masked"]),
             helper.make_node("Where", ["masked", "ninf", "zerof"], ["bias"]),
             helper.make_node("Det", ["eye"], ["det"]),
             helper.make_node("Cast", ["r"], ["rf"], to=F),
             helper.make_node("Mul", ["rf", "det"], ["rd"]),
             helper.make_node("Add", ["bias", "rd"], ["b2"]),
             helper.make_node("Expand", ["b2", "shape3"], ["b3"]),
             helper.make_node("Where", ["nan", "zerof", "b3"], ["b4"]),
             helper.make_node("Add", ["x", "b4"], ["y"])]
    inits = {"zero": np.array(0, np.int64), "four": np.array(4, np.int64),
             "one": np.array(1, np.int64), "shape": np.array([4, 4], np.int64),
             "zerof": np.array(0, np.float32), "ninf": np.array(-1e9, np.float32),
             "eye": np.eye(3, dtype=np.float32) * 2, "shape3": np.array([2, 4, 4], np.int64)}
    m = model(nodes, [("x", [2, 4, 4], F)], [("y", None, F)], inits)
    graph = from_onnx(m)
    assert [n.op for n in graph.nodes] == ["add"]
    check(m, {"x": rand(2, 4, 4)})


def test_out_of_range_constant_indices_are_refused_at_import():
    m = model([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], [("x", [2, 3], F)],
              [("y", None, F)], {"i": np.array([0, 3], np.int64)})
    with pytest.raises(ImportError_, match=r"Gather index 3 is out of range for axis 1 of "
                                           r"size 3 \(ONNX Runtime refuses it too\)"):
        from_onnx(m)


# ------------------------------------------------------------------ opsets 13 to 21
def opset_family(opset):
    """Operators whose attributes became inputs between opsets 13 and 21 (Split,
    Squeeze/Unsqueeze, Reduce*, Clip, Pad, Resize), built at opset 13 and converted."""
    from onnx import version_converter
    nodes = [helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=2),
             helper.make_node("Unsqueeze", ["a", "ax0"], ["u"]),
             helper.make_node("Squeeze", ["u", "ax0"], ["s"]),
             helper.make_node("ReduceMean", ["s"], ["rm"], axes=[1], keepdims=1),
             helper.make_node("ReduceSum", ["b", "ax1"], ["rs"], keepdims=1),
             helper.make_node("ReduceMax", ["b"], ["rx"], axes=[2], keepdims=0),
             helper.make_node("Clip", ["b", "lo", "hi"], ["c"]),
             helper.make_node("Pad", ["c", "pads", "val"], ["p"]),
             helper.make_node("Resize", ["x", "", "scales"], ["r"], mode="nearest"),
             helper.make_node("Softmax", ["p"], ["sm"], axis=1)]
    inits = {"sizes": np.array([2, 4], np.int64), "ax0": np.array([0], np.int64),
             "ax1": np.array([1], np.int64), "lo": np.array(-0.5, np.float32),
             "hi": np.array(0.5, np.float32), "pads": np.array([0, 1, 0, 0, 2, 1], np.int64),
             "val": np.array(1.5, np.float32), "scales": np.array([1, 2, 1.5], np.float32)}
    outs = [(o, None, F) for o in ("rm", "rs", "rx", "sm", "r")]
    m = model(nodes, [("x", [2, 3, 6], F)], outs, inits, opset=13)
    if opset != 13:
        m = version_converter.convert_version(m, opset)
    assert m.opset_import[0].version == opset
    return m, {"x": rand(2, 3, 6)}


@pytest.mark.parametrize("opset", [13, 15, 18, 21])
def test_opsets_13_to_21(opset):
    check(*opset_family(opset))


# ------------------------------------------------------------------ the zoo's small tier
SMALL_ZOO = ["mobilenet_v3_small", "bert_tiny", "m5"]


@pytest.fixture(scope="module")
def exported_zoo(tmp_path_factory):
    """name -> (graph imported from the model's ONNX export, numpy inputs, torch's output),
    each exported once."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    from looptune.testing import zoo
    cache = {}

    def get(name):
        if name not in zoo.names("small"):
            pytest.skip(f"{name} left the zoo's small tier")
        if name not in cache:
            net, inputs = zoo.build(name)
            with torch.no_grad():
                want = net(*inputs).numpy()
            path = zoo.export_onnx(net, inputs, tmp_path_factory.mktemp("zoo") / f"{name}.onnx")
            feeds = [t.numpy().astype(np.int32) if t.dtype == torch.int64 else t.numpy()
                     for t in inputs]
            cache[name] = from_onnx(path), feeds, want
        return cache[name]
    return get


def rel_err(got, want):
    return float(np.max(np.abs(np.asarray(got) - want)) / np.max(np.abs(want)))


@pytest.mark.parametrize("name", SMALL_ZOO)
def test_small_zoo_models_through_onnx_match_torch(name, exported_zoo):
    graph, feeds, want = exported_zoo(name)
    assert rel_err(evaluate(graph, *feeds)[0], want) <= 1e-3


@pytest.mark.cc
@pytest.mark.parametrize("name", ["bert_tiny", "m5"])
def test_small_zoo_models_through_onnx_compile(name, exported_zoo):
    import looptune
    graph, feeds, want = exported_zoo(name)
    got = looptune.compile_model(graph, target="cpu")(*feeds)
    assert rel_err(got[0] if isinstance(got, (list, tuple)) else got, want) <= 1e-3


def test_the_small_tier_is_tested():
    zoo = pytest.importorskip("looptune.testing.zoo")
    assert set(zoo.names("small")) <= set(SMALL_ZOO)
