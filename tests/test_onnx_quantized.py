"""Quantized ONNX models, as onnxruntime.quantization makes them: every operator on one node
(onnx.helper, random inputs with values at rounding ties and values that saturate), then a
small CNN and a transformer block quantized by quantize_static (QDQ and QOperator formats) and
quantize_dynamic, each checked against ONNX Runtime: the import (numpy references) and the
compiled model.

ONNX Runtime's u8 x s8 integer GEMM on AVX2 without VNNI adds pairs of products in int16 and
saturates (its documented reason for reduce_range), so s8 weights that meet u8 activations stay
within 7 bits here: what is checked is looptune, not that quirk."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from looptune.frontend.common import ImportError_  # noqa: E402
from looptune.frontend.onnx import from_onnx  # noqa: E402
from looptune.graph import evaluate  # noqa: E402

F, U8, I8, I16, I32 = (TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8,
                       TensorProto.INT16, TensorProto.INT32)
MS = "com.microsoft"


def rng():
    return np.random.default_rng(7)


def qmodel(nodes, inputs, outputs, inits=(), opset=21):
    """inputs/outputs: [(name, shape, elem_type)]; inits: {name: array}; the default domain at
    `opset` and com.microsoft's contrib operators."""
    g = helper.make_graph(
        nodes, "q",
        [helper.make_tensor_value_info(n, t, s) for n, s, t in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, s, t in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in dict(inits).items()])
    ops = [helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = 10
    return m


def run_ort(m, feeds):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def as_graph_inputs(feeds):
    """Integer tensors are int32 in a graph."""
    return [v.astype(np.int32) if v.dtype.kind in "iu" else v for v in feeds.values()]


def assert_matches(got, want, what=""):
    """8- and 16-bit outputs at most 1 apart and equal on 95% of the elements, int32 ones
    exactly, float ones to float32 rounding."""
    got = np.asarray(got).reshape(np.shape(want))
    if want.dtype in (np.uint8, np.int8, np.uint16, np.int16):
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        assert diff.max() <= 1 and np.mean(diff == 0) >= 0.95, \
            f"{what}: {np.count_nonzero(diff)} of {diff.size} differ, by up to {diff.max()}"
    elif want.dtype == np.int32:
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=what)


def ties(scale, ks):
    """float32 values x with x / scale, a float32 division as ONNX Runtime's, exactly k + 0.5:
    where round half to even and round half away from zero part."""
    s, out = np.float32(scale), []
    for k in ks:
        t = np.float32(k + 0.5)
        x = np.float32(float(t) * float(s))
        for _ in range(16):
            if x / s == t:
                out.append(x)
                break
            x = np.nextafter(x, np.float32(np.inf) if x / s < t else np.float32(-np.inf))
    return np.array(out, np.float32)


def ints(r, dtype, shape, lo=None, hi=None):
    info = np.iinfo(dtype)
    return r.integers(info.min if lo is None else lo, (info.max if hi is None else hi) + 1,
                      shape).astype(dtype)


def f32(v):
    return np.asarray(v, np.float32)


# ------------------------------------------------------------------ one operator per model
def quantize_linear():
    """Per tensor (uint8, int8, int16, no zero point), per axis (1 and the last), and opset 21's
    output_dtype, on values at ties of each scale and values far out of range."""
    r = rng()
    x = (r.standard_normal((2, 4, 16)) * 3).astype(np.float32)
    flat = x.reshape(-1)
    t = np.concatenate([ties(0.05, range(-8, 8)), ties(0.1, range(-6, 6)),
                        (np.arange(-8, 8) + 0.5) * np.float32(0.125)])
    flat[:t.size] = t
    flat[t.size:t.size + 6] = [1e3, -1e3, 50.0, -50.0, 20.0, -20.0]
    r.shuffle(flat)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s1", "z1"], ["y1"]),
             helper.make_node("QuantizeLinear", ["x", "s2", "z2"], ["y2"]),
             helper.make_node("QuantizeLinear", ["x", "s3", "z3"], ["y3"], axis=1),
             helper.make_node("QuantizeLinear", ["x", "s4"], ["y4"]),
             helper.make_node("QuantizeLinear", ["x", "s5", "z5"], ["y5"], axis=-1),
             helper.make_node("QuantizeLinear", ["x", "s2"], ["y6"], output_dtype=I8),
             helper.make_node("QuantizeLinear", ["x", "s6", "z6"], ["y7"])]
    inits = {"s1": f32(0.05), "z1": np.uint8(128), "s2": f32(0.125), "z2": np.int8(-3),
             "s3": f32([0.5, 0.05, 0.25, 0.07]), "z3": np.array([0, 1, -2, 3], np.int8),
             "s4": f32(0.1), "s5": f32(r.uniform(0.01, 0.2, 16)),
             "z5": ints(r, np.uint8, 16, 100, 150), "s6": f32(0.001),
             "z6": np.int16(-7)}
    outs = [("y1", None, U8), ("y2", None, I8), ("y3", None, I8), ("y4", None, U8),
            ("y5", None, U8), ("y6", None, I8), ("y7", None, I16)]
    return qmodel(nodes, [("x", [2, 4, 16], F)], outs, inits), {"x": x}


def dequantize_linear():
    """uint8 per tensor, int8 per axis, an int32 bias, and constant int8 weights per axis."""
    r = rng()
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["ya"]),
             helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["yb"], axis=1),
             helper.make_node("DequantizeLinear", ["c", "sc"], ["yc"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["dw"], axis=2),
             helper.make_node("Add", ["ya", "dw"], ["yw"])]
    inits = {"sa": f32(0.02), "za": np.uint8(128), "sb": f32([0.5, 0.01, 0.3, 0.07]),
             "zb": np.array([0, -1, 5, 127], np.int8), "sc": f32(0.001),
             "w": ints(r, np.int8, (2, 4, 5)), "sw": f32(r.uniform(0.01, 0.1, 5)),
             "zw": ints(r, np.int8, 5, -3, 3)}
    feeds = {"a": ints(r, np.uint8, (2, 4, 5)), "b": ints(r, np.int8, (2, 4, 5)),
             "c": ints(r, np.int32, 8, -2 ** 30, 2 ** 30)}
    inputs = [("a", [2, 4, 5], U8), ("b", [2, 4, 5], I8), ("c", [8], I32)]
    outs = [("ya", None, F), ("yb", None, F), ("yc", None, F), ("yw", None, F)]
    return qmodel(nodes, inputs, outs, inits), feeds


def dynamic_quantize_linear():
    """Inputs of both signs, and all positive (the range still includes 0)."""
    r = rng()
    x1 = (r.standard_normal((3, 7)) * 2).astype(np.float32)
    x2 = r.uniform(0.5, 3, (3, 7)).astype(np.float32)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x1"], ["y1", "s1", "z1"]),
             helper.make_node("DynamicQuantizeLinear", ["x2"], ["y2", "s2", "z2"])]
    outs = [("y1", None, U8), ("s1", None, F), ("z1", None, U8), ("y2", None, U8),
            ("s2", None, F), ("z2", None, U8)]
    return qmodel(nodes, [("x1", [3, 7], F), ("x2", [3, 7], F)], outs), {"x1": x1, "x2": x2}


def matmul_integer():
    """u8 x s8 with a per-column zero point on b, s8 x s8, and u8 x u8 of two computed
    tensors in a batch."""
    r = rng()
    nodes = [helper.make_node("MatMulInteger", ["a", "w", "za", "zw"], ["y1"]),
             helper.make_node("MatMulInteger", ["a8", "w8", "za8", "zw8"], ["y2"]),
             helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y3"])]
    inits = {"w": ints(r, np.int8, (8, 5), -64, 63), "za": np.uint8(131),
             "zw": ints(r, np.int8, 5, -4, 4), "w8": ints(r, np.int8, (8, 6)),
             "za8": np.int8(-5), "zw8": np.int8(3), "zb": np.uint8(120)}
    feeds = {"a": ints(r, np.uint8, (2, 3, 8)), "a8": ints(r, np.int8, (4, 8)),
             "b": ints(r, np.uint8, (2, 8, 4))}
    inputs = [("a", [2, 3, 8], U8), ("a8", [4, 8], I8), ("b", [2, 8, 4], U8)]
    outs = [("y1", None, I32), ("y2", None, I32), ("y3", None, I32)]
    return qmodel(nodes, inputs, outs, inits), feeds


def conv_integer():
    """u8 x u8 with pads and strides, and u8 x s8 with asymmetric pads (padded with x's zero
    point, as ONNX Runtime pads)."""
    r = rng()
    nodes = [helper.make_node("ConvInteger", ["x", "w", "zx", "zw"], ["y1"], pads=[1, 1, 1, 1],
                              strides=[2, 2]),
             helper.make_node("ConvInteger", ["x", "w8", "zx"], ["y2"], pads=[0, 1, 1, 0])]
    inits = {"w": ints(r, np.uint8, (4, 3, 3, 3)), "zx": np.uint8(120), "zw": np.uint8(128),
             "w8": ints(r, np.int8, (2, 3, 2, 2), -64, 63)}
    feeds = {"x": ints(r, np.uint8, (1, 3, 7, 7))}
    return qmodel(nodes, [("x", [1, 3, 7, 7], U8)], [("y1", None, I32), ("y2", None, I32)],
                  inits), feeds


def qlinear_matmul():
    """u8 x s8 per column to u8 (saturating), s8 x s8 to s8 with power-of-two scales (every
    odd accumulator is a tie), u8 x u8 of two computed tensors."""
    r = rng()
    nodes = [helper.make_node("QLinearMatMul", ["a", "sa", "za", "w", "sw", "zw", "sy", "zy"],
                              ["y1"]),
             helper.make_node("QLinearMatMul", ["a8", "p3", "za8", "w8", "p4", "zw8", "p1",
                                                "zy8"], ["y2"]),
             helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy3", "zy"],
                              ["y3"])]
    inits = {"sa": f32(0.02), "za": np.uint8(128), "w": ints(r, np.int8, (8, 5), -64, 63),
             "sw": f32(r.uniform(0.005, 0.02, 5)), "zw": np.zeros(5, np.int8),
             "sy": f32(0.01), "zy": np.uint8(100), "p3": f32(2 ** -3), "p4": f32(2 ** -4),
             "p1": f32(2 ** -1), "za8": np.int8(2), "w8": ints(r, np.int8, (8, 6)),
             "zw8": np.int8(-1), "zy8": np.int8(-10), "sb": f32(0.03), "zb": np.uint8(128),
             "sy3": f32(0.5)}
    feeds = {"a": ints(r, np.uint8, (2, 4, 8)), "a8": ints(r, np.int8, (3, 8)),
             "b": ints(r, np.uint8, (2, 8, 3))}
    inputs = [("a", [2, 4, 8], U8), ("a8", [3, 8], I8), ("b", [2, 8, 3], U8)]
    return qmodel(nodes, inputs, [("y1", None, U8), ("y2", None, I8), ("y3", None, U8)],
                  inits), feeds


def qlinear_conv():
    """u8 x s8 per output channel with an int32 bias, pads and strides; a depthwise s8 one
    with asymmetric pads and power-of-two scales (ties)."""
    r = rng()
    nodes = [helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy",
                                              "bias"], ["y1"], pads=[1, 1, 1, 1],
                              strides=[2, 2]),
             helper.make_node("QLinearConv", ["x8", "p2", "zx8", "w8", "p3", "zw8", "p1",
                                              "zy8"], ["y2"], group=4, pads=[0, 1, 1, 0])]
    inits = {"sx": f32(0.02), "zx": np.uint8(120), "w": ints(r, np.int8, (4, 3, 3, 3), -64, 63),
             "sw": f32(r.uniform(0.002, 0.01, 4)), "zw": np.zeros(4, np.int8),
             "sy": f32(0.02), "zy": np.uint8(128), "bias": ints(r, np.int32, 4, -5000, 5000),
             "p2": f32(2 ** -2), "zx8": np.int8(-3), "w8": ints(r, np.int8, (4, 1, 3, 3)),
             "p3": f32(2 ** -3), "zw8": np.int8(0), "p1": f32(2 ** 3), "zy8": np.int8(4)}
    feeds = {"x": ints(r, np.uint8, (1, 3, 7, 7)), "x8": ints(r, np.int8, (1, 4, 6, 6))}
    inputs = [("x", [1, 3, 7, 7], U8), ("x8", [1, 4, 6, 6], I8)]
    return qmodel(nodes, inputs, [("y1", None, U8), ("y2", None, I8)], inits), feeds


def _qlinear_binary(op):
    r = rng()
    nodes = [helper.make_node(op, ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["y1"],
                              domain=MS),
             helper.make_node(op, ["a8", "p2", "z8", "b8", "p3", "z8", "p1"], ["y2"],
                              domain=MS)]
    inits = {"sa": f32(0.03), "za": np.uint8(128), "sb": f32(0.05), "zb": np.uint8(100),
             "sc": f32(0.04), "zc": np.uint8(120), "p2": f32(2 ** -2), "p3": f32(2 ** -3),
             "p1": f32(2 ** -1), "z8": np.int8(-2)}
    feeds = {"a": ints(r, np.uint8, (2, 3, 4, 4)), "b": ints(r, np.uint8, (1, 3, 1, 1)),
             "a8": ints(r, np.int8, (2, 5)), "b8": ints(r, np.int8, (2, 5))}
    inputs = [("a", [2, 3, 4, 4], U8), ("b", [1, 3, 1, 1], U8), ("a8", [2, 5], I8),
              ("b8", [2, 5], I8)]
    return qmodel(nodes, inputs, [("y1", None, U8), ("y2", None, I8)], inits), feeds


def qlinear_add():
    """u8 with a broadcast operand, s8 without C's zero point (0)."""
    return _qlinear_binary("QLinearAdd")


def qlinear_mul():
    return _qlinear_binary("QLinearMul")


def _qlinear_unary(op, **attrs):
    r = rng()
    nodes = [helper.make_node(op, ["x", "sx", "zx", "sy", "zy"], ["y1"], domain=MS, **attrs),
             helper.make_node(op, ["x8", "sx", "zx8", "sy8", "zy8"], ["y2"], domain=MS,
                              **attrs)]
    inits = {"sx": f32(0.05), "zx": np.uint8(128), "sy": f32(1 / 256), "zy": np.uint8(0),
             "zx8": np.int8(0), "sy8": f32(0.01), "zy8": np.int8(-3)}
    feeds = {"x": ints(r, np.uint8, (2, 3, 5)), "x8": ints(r, np.int8, (2, 3, 5))}
    return qmodel(nodes, [("x", [2, 3, 5], U8), ("x8", [2, 3, 5], I8)],
                  [("y1", None, U8), ("y2", None, I8)], inits), feeds


def qlinear_sigmoid():
    return _qlinear_unary("QLinearSigmoid")


def qlinear_leaky_relu():
    return _qlinear_unary("QLinearLeakyRelu", alpha=0.1)


def qlinear_softmax():
    """The last axis (u8), and an inner one (s8, ONNX Runtime transposes)."""
    r = rng()
    nodes = [helper.make_node("QLinearSoftmax", ["x", "sx", "zx", "sy", "zy"], ["y1"],
                              domain=MS, axis=-1, opset=13),
             helper.make_node("QLinearSoftmax", ["x8", "sx8", "zx8", "sy8", "zy8"], ["y2"],
                              domain=MS, axis=1, opset=13)]
    inits = {"sx": f32(0.1), "zx": np.uint8(128), "sy": f32(0.0039), "zy": np.uint8(0),
             "sx8": f32(0.05), "zx8": np.int8(0), "sy8": f32(1 / 255), "zy8": np.int8(-128)}
    feeds = {"x": ints(r, np.uint8, (2, 3, 10)), "x8": ints(r, np.int8, (2, 10, 3))}
    return qmodel(nodes, [("x", [2, 3, 10], U8), ("x8", [2, 10, 3], I8)],
                  [("y1", None, U8), ("y2", None, I8)], inits), feeds


def qlinear_global_average_pool():
    """NCHW u8 and channels-last s8."""
    r = rng()
    nodes = [helper.make_node("QLinearGlobalAveragePool", ["x", "sx", "zx", "sy", "zy"], ["y1"],
                              domain=MS, channels_last=0),
             helper.make_node("QLinearGlobalAveragePool", ["x8", "sx", "zx8", "sy8", "zy8"],
                              ["y2"], domain=MS, channels_last=1)]
    inits = {"sx": f32(0.05), "zx": np.uint8(128), "sy": f32(0.02), "zy": np.uint8(128),
             "zx8": np.int8(1), "sy8": f32(0.01), "zy8": np.int8(0)}
    feeds = {"x": ints(r, np.uint8, (1, 4, 5, 5)), "x8": ints(r, np.int8, (1, 5, 5, 4))}
    return qmodel(nodes, [("x", [1, 4, 5, 5], U8), ("x8", [1, 5, 5, 4], I8)],
                  [("y1", None, U8), ("y2", None, I8)], inits), feeds


def qlinear_average_pool():
    """Pads without counting them (u8), counting them with ceil_mode (s8)."""
    r = rng()
    nodes = [helper.make_node("QLinearAveragePool", ["x", "sx", "zx", "sy", "zy"], ["y1"],
                              domain=MS, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("QLinearAveragePool", ["x8", "sx", "zx8", "sy", "zy8"], ["y2"],
                              domain=MS, kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1],
                              count_include_pad=1, ceil_mode=1)]
    inits = {"sx": f32(0.05), "zx": np.uint8(128), "sy": f32(0.03), "zy": np.uint8(120),
             "zx8": np.int8(0), "zy8": np.int8(-1)}
    feeds = {"x": ints(r, np.uint8, (1, 3, 7, 7)), "x8": ints(r, np.int8, (1, 2, 6, 6))}
    return qmodel(nodes, [("x", [1, 3, 7, 7], U8), ("x8", [1, 2, 6, 6], I8)],
                  [("y1", None, U8), ("y2", None, I8)], inits), feeds


def qlinear_concat():
    """One input already in the output's scale and zero point, one requantized."""
    r = rng()
    nodes = [helper.make_node("QLinearConcat", ["sy", "zy", "a", "sy", "zy", "b", "sb", "zb"],
                              ["y"], domain=MS, axis=1)]
    inits = {"sy": f32(0.05), "zy": np.uint8(128), "sb": f32(0.08), "zb": np.uint8(90)}
    feeds = {"a": ints(r, np.uint8, (1, 2, 3, 3)), "b": ints(r, np.uint8, (1, 3, 3, 3))}
    return qmodel(nodes, [("a", [1, 2, 3, 3], U8), ("b", [1, 3, 3, 3], U8)],
                  [("y", None, U8)], inits), feeds


def qgemm():
    """transB with per-column scales and an int32 C to u8; alpha, to float."""
    r = rng()
    nodes = [helper.make_node("QGemm", ["a", "sa", "za", "w", "sw", "zw", "c", "sy", "zy"],
                              ["y1"], domain=MS, transB=1),
             helper.make_node("QGemm", ["a8", "sa", "za8", "w8", "sw8", "zw8", "cf"], ["y2"],
                              domain=MS, alpha=0.5)]
    inits = {"sa": f32(0.02), "za": np.uint8(128), "w": ints(r, np.int8, (5, 8), -64, 63),
             "sw": f32(r.uniform(0.005, 0.02, 5)), "zw": np.zeros(5, np.int8),
             "c": ints(r, np.int32, 5, -3000, 3000), "sy": f32(0.01), "zy": np.uint8(120),
             "za8": np.int8(0), "w8": ints(r, np.int8, (8, 5)), "sw8": f32(0.01),
             "zw8": np.int8(0), "cf": ints(r, np.int32, 5, -3000, 3000)}
    feeds = {"a": ints(r, np.uint8, (3, 8)), "a8": ints(r, np.int8, (3, 8))}
    return qmodel(nodes, [("a", [3, 8], U8), ("a8", [3, 8], I8)],
                  [("y1", None, U8), ("y2", None, F)], inits), feeds


def qdq_groups():
    """dequantize -> Add / Mul / Softmax / AveragePool -> quantize, which ONNX Runtime runs as
    its QLinear operators (and rounds as they do: scale ratios of 3/4 and 5/4 make ties)."""
    r = rng()
    dq = [helper.make_node("DequantizeLinear", [v, "s" + v, "z" + v], ["d" + v])
          for v in ("a", "b", "x", "p")]
    nodes = dq + [
        helper.make_node("Add", ["da", "db"], ["sum"]),
        helper.make_node("QuantizeLinear", ["sum", "sc", "zc"], ["y1"]),
        helper.make_node("Mul", ["da", "db"], ["prod"]),
        helper.make_node("QuantizeLinear", ["prod", "sm", "zc"], ["y2"]),
        helper.make_node("Softmax", ["dx"], ["sx_"], axis=-1),
        helper.make_node("QuantizeLinear", ["sx_", "sy", "zy"], ["y3"]),
        helper.make_node("AveragePool", ["dp"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("QuantizeLinear", ["ap", "sc", "zc"], ["y4"])]
    inits = {"sa": f32(0.03), "za": np.uint8(128), "sb": f32(0.05), "zb": np.uint8(101),
             "sc": f32(0.04), "zc": np.uint8(121), "sm": f32(0.1), "sx": f32(0.1),
             "zx": np.uint8(128), "sy": f32(0.0039), "zy": np.uint8(0), "sp": f32(0.03),
             "zp": np.uint8(3)}
    feeds = {"a": ints(r, np.uint8, (4, 16)), "b": ints(r, np.uint8, (4, 16)),
             "x": ints(r, np.uint8, (2, 10)), "p": ints(r, np.uint8, (1, 2, 6, 6))}
    inputs = [("a", [4, 16], U8), ("b", [4, 16], U8), ("x", [2, 10], U8),
              ("p", [1, 2, 6, 6], U8)]
    outs = [("y1", None, U8), ("y2", None, U8), ("y3", None, U8), ("y4", None, U8)]
    return qmodel(nodes, inputs, outs, inits), feeds


CASES = {f.__name__: f for f in (
    quantize_linear, dequantize_linear, dynamic_quantize_linear, matmul_integer, conv_integer,
    qlinear_matmul, qlinear_conv, qlinear_add, qlinear_mul, qlinear_sigmoid, qlinear_leaky_relu,
    qlinear_softmax, qlinear_global_average_pool, qlinear_average_pool, qlinear_concat, qgemm,
    qdq_groups)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_operators_import_as_onnx_runtime_computes(name):
    m, feeds = CASES[name]()
    want = run_ort(m, feeds)
    got = evaluate(from_onnx(m), *as_graph_inputs(feeds))
    for o, g, w in zip(m.graph.output, got, want, strict=True):
        assert_matches(g, w, f"{name} {o.name}")


@pytest.mark.cc
@pytest.mark.parametrize("name", sorted(CASES))
def test_operators_compile_as_onnx_runtime_computes(name):
    import looptune
    m, feeds = CASES[name]()
    want = run_ort(m, feeds)
    got = looptune.compile_model(from_onnx(m), target="cpu")(*as_graph_inputs(feeds))
    got = got if isinstance(got, (list, tuple)) else [got]
    for o, g, w in zip(m.graph.output, got, want, strict=True):
        assert_matches(g, w, f"{name} {o.name}")


def test_dynamic_quantization_of_zeros_is_what_onnx_runtime_makes():
    """All zeros: ONNX Runtime's scale is 1 (not the 0 of (max - min) / 255), zero point 0."""
    m, _ = dynamic_quantize_linear()
    feeds = {"x1": np.zeros((3, 7), np.float32), "x2": np.ones((3, 7), np.float32)}
    want = run_ort(m, feeds)
    assert want[1] == 1.0
    for g, w in zip(evaluate(from_onnx(m), *feeds.values()), want, strict=True):
        assert_matches(g, w)


def test_dequantize_stays_a_cast_sub_mul_of_the_int32_tensor():
    """What a later int8 rewrite looks for: dequantize(q) = mul(cast(sub(q, zp)), scale)."""
    m, _ = dequantize_linear()
    graph = from_onnx(m)
    ya = graph.outputs[0].producer
    assert ya.op == "mul" and ya.attrs == {"scalar": float(np.float32(0.02))}
    cast = ya.inputs[0].producer
    assert cast.op == "cast" and cast.inputs[0].producer.op == "sub"
    assert cast.inputs[0].producer.inputs[0] is graph.inputs[0]


# ------------------------------------------------------------------ refusals
def _one_node(node, inputs, outputs, inits):
    return qmodel([node], inputs, outputs, inits)


def test_a_zero_scale_is_refused_naming_the_node():
    m = _one_node(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="q0"),
                  [("x", [4], F)], [("y", None, U8)], {"s": f32(0.0), "z": np.uint8(0)})
    with pytest.raises(ImportError_, match=r"QuantizeLinear x1 \(e.g. node q0\): the scale is "
                                           r"0.0; a quantization scale must be finite and "
                                           r"nonzero"):
        from_onnx(m)
    m = _one_node(helper.make_node("QLinearConv", ["x", "s", "z", "w", "s0", "zw", "s", "z"],
                                   ["y"], name="conv0"),
                  [("x", [1, 1, 3, 3], U8)], [("y", None, U8)],
                  {"s": f32(0.1), "z": np.uint8(0), "w": np.ones((2, 1, 1, 1), np.int8),
                   "s0": f32([0.1, 0.0]), "zw": np.zeros(2, np.int8)})
    with pytest.raises(ImportError_, match="node conv0.*w_scale is 0.0"):
        from_onnx(m)


def refusal(node, inputs, outputs, inits=(), extra_inits=()):
    """The import error of a one-node model."""
    m = _one_node(node, inputs, outputs, inits)
    m.graph.initializer.extend(extra_inits)
    with pytest.raises(ImportError_) as info:
        from_onnx(m)
    return str(info.value)


def test_unsupported_quantization_forms_are_refused_clearly():
    blocked = helper.make_node("DequantizeLinear", ["w", "s"], ["y"], axis=0, block_size=2,
                               name="blocked")
    assert "(e.g. node blocked): blocked quantization (block_size) is not supported" in refusal(
        blocked, [("w", [4, 3], I8)], [("y", None, F)], {"s": f32(np.ones((2, 3)))})
    four_bit = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], name="int4")
    text = refusal(four_bit, [("x", [4], TensorProto.INT4)], [("y", None, F)],
                   extra_inits=[helper.make_tensor("s", F, [], [0.5]),
                                helper.make_tensor("z", TensorProto.INT4, [], [1])])
    assert "input x: element type 22 is not supported" in text
    softmax12 = helper.make_node("QLinearSoftmax", ["q", "s", "z", "s", "z"], ["p"], domain=MS,
                                 axis=1, opset=12, name="sm12")
    assert "(e.g. node sm12): QLinearSoftmax of opset 12 over the axes from 1 on is not supported" \
        in refusal(softmax12, [("q", [2, 3, 4], U8)], [("p", None, U8)],
                   {"s": f32(0.1), "z": np.uint8(1)})
    per_row = helper.make_node("QLinearMatMul", ["q", "sr", "z", "q2", "s", "z", "s", "z"],
                               ["mm"], name="rows")
    assert "(e.g. node rows): QLinearMatMul with a per-row a_scale" in refusal(
        per_row, [("q", [3, 4], U8), ("q2", [4, 2], U8)], [("mm", None, U8)],
        {"s": f32(0.1), "z": np.uint8(1), "sr": f32([0.1, 0.2, 0.3])})
    int4_zp = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="q4")
    assert "(e.g. node q4): the quantized type of z is int4" in refusal(
        int4_zp, [("x", [4], F)], [("y", None, TensorProto.INT4)],
        extra_inits=[helper.make_tensor("s", F, [], [0.5]),
                     helper.make_tensor("z", TensorProto.INT4, [], [1])])


def test_an_operator_after_one_of_unknown_shape_is_refused_not_crashed():
    """A node whose output ONNX cannot type (a custom domain's) stands in as a 0-d tensor;
    the Softmax after it computed axis % rank with rank 0 (ZeroDivisionError). Now one error
    names the operator that does not import."""
    nodes = [helper.make_node("Custom", ["x"], ["c"], domain="com.example"),
             helper.make_node("Softmax", ["c"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", F, [2, 3])],
                          [helper.make_tensor_value_info("y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.example", 1)])
    with pytest.raises(ImportError_, match=r"1 node\(s\) of 1 ONNX operator.*\n  "
                                           r"com.example.Custom x1"):
        from_onnx(m)


# ------------------------------------------------------------------ whole models
def _weights(r, *shape, scale=1.0):
    return (r.uniform(-1, 1, shape) * scale).astype(np.float32)


def small_cnn():
    """Three convolutions (relu, a max pool, a residual add, a concat), a global average pool,
    a Gemm."""
    r = rng()
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c3", "p1"], ["a"]),
             helper.make_node("Relu", ["a"], ["r3"]),
             helper.make_node("Concat", ["r3", "p1"], ["cat"], axis=1),
             helper.make_node("GlobalAveragePool", ["cat"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    inits = {"w1": _weights(r, 8, 3, 3, 3), "b1": _weights(r, 8),
             "w2": _weights(r, 8, 8, 3, 3, scale=0.3), "b2": _weights(r, 8),
             "w3": _weights(r, 8, 8, 3, 3, scale=0.3), "b3": _weights(r, 8),
             "wf": _weights(r, 5, 16), "bf": _weights(r, 5)}
    return qmodel(nodes, [("x", [1, 3, 8, 8], F)], [("y", [1, 5], F)], inits, opset=17)


def transformer_block():
    """Single-head attention (q, k, v projections, a scaled softmax), the out projection with a
    residual, a layer norm and a GELU feed-forward with a residual."""
    r, d = rng(), 8
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]),
             helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("MatMul", ["x", "wv"], ["v"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["o"]),
             helper.make_node("MatMul", ["o", "wo"], ["o2"]),
             helper.make_node("Add", ["o2", "bo"], ["o3"]),
             helper.make_node("Add", ["o3", "x"], ["res"]),
             helper.make_node("LayerNormalization", ["res", "g", "b"], ["ln"], axis=-1),
             helper.make_node("MatMul", ["ln", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Gelu", ["hb"], ["ge"]),
             helper.make_node("MatMul", ["ge", "w2"], ["f"]),
             helper.make_node("Add", ["f", "ln"], ["y"])]
    inits = {"wq": _weights(r, d, d), "wk": _weights(r, d, d), "wv": _weights(r, d, d),
             "wo": _weights(r, d, d), "bo": _weights(r, d), "scale": f32(d ** -0.5),
             "g": _weights(r, d) + 1, "b": _weights(r, d), "w1": _weights(r, d, 16),
             "b1": _weights(r, 16), "w2": _weights(r, 16, d)}
    return qmodel(nodes, [("x", [1, 6, d], F)], [("y", [1, 6, d], F)], inits, opset=20)


MODELS = {"cnn": (small_cnn, (1, 3, 8, 8)), "transformer": (transformer_block, (1, 6, 8))}
# how each model is quantized, and operators its quantized form must hold
QUANTIZATIONS = {
    "qdq": {"cnn": {"QuantizeLinear", "DequantizeLinear"},
            "transformer": {"QuantizeLinear", "DequantizeLinear"}},
    "qdq_symmetric": {"cnn": {"QuantizeLinear", "DequantizeLinear"},
                      "transformer": {"QuantizeLinear", "DequantizeLinear"}},
    "qoperator": {"cnn": {"QLinearConv", "QLinearAdd", "QLinearConcat",
                          "QLinearGlobalAveragePool", "QGemm"},
                  "transformer": {"QLinearMatMul", "QLinearAdd", "QLinearMul",
                                  "QLinearSoftmax"}},
    "dynamic": {"cnn": {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"},
                "transformer": {"DynamicQuantizeLinear", "MatMulInteger"}},
}


def quantized(model, how, path):
    """(the quantized model, its input's shape): QDQ per channel (u8 activations, 7-bit s8
    weights), QDQ per tensor and symmetric (s8 x s8), QOperator per channel (s8 x s8), dynamic
    (u8 x 7-bit s8)."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)
    build, shape = MODELS[model]
    src, dst = path / f"{model}.onnx", path / f"{model}_{how}.onnx"
    onnx.save(build(), src)

    class Reader(CalibrationDataReader):
        def __init__(self):
            r = np.random.default_rng(3)
            self.batches = iter([{"x": r.uniform(-1, 1, shape).astype(np.float32)}
                                 for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    if how == "dynamic":
        quantize_dynamic(src, dst, per_channel=model == "cnn", reduce_range=True)
    elif how == "qdq":
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        reduce_range=True, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8)
    elif how == "qdq_symmetric":
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=False,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        extra_options={"ActivationSymmetric": True})
    else:
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QOperator,
                        per_channel=True, activation_type=QuantType.QInt8,
                        weight_type=QuantType.QInt8)
    return onnx.load(dst), shape


def output_unit(m):
    """The output's quantization step (its DequantizeLinear's scale), else None (a float
    output computed from dequantized values)."""
    last = next(n for n in m.graph.node if n.output[0] == m.graph.output[0].name)
    if last.op_type != "DequantizeLinear":
        return None
    return float(next(numpy_helper.to_array(i) for i in m.graph.initializer
                      if i.name == last.input[1]))


@pytest.mark.cc
@pytest.mark.parametrize("how", sorted(QUANTIZATIONS))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_quantized_models_compute_what_onnx_runtime_computes(model, how, tmp_path):
    """Within one output step of ONNX Runtime on every element (a float output: within 5e-2
    of the output's range), by the numpy references and by the compiled model."""
    import looptune
    m, shape = quantized(model, how, tmp_path)
    ops = {n.op_type for n in m.graph.node}
    assert QUANTIZATIONS[how][model] <= ops
    graph = from_onnx(m)
    unit = output_unit(m)
    compiled = looptune.compile_model(graph, target="cpu")
    r = np.random.default_rng(5)
    for _ in range(2):
        x = r.uniform(-1.2, 1.2, shape).astype(np.float32)
        want = run_ort(m, {"x": x})[0]
        bound = unit * 1.001 if unit else 5e-2 * float(np.ptp(want))
        for got in (evaluate(graph, x)[0], compiled(x)):
            got = np.asarray(got[0] if isinstance(got, (list, tuple)) else got)
            assert np.abs(got.reshape(want.shape) - want).max() <= bound


@pytest.mark.slow  # torch exports the model: about 10 s
@pytest.mark.filterwarnings("ignore::DeprecationWarning",
                            "ignore:Converting a tensor to a Python boolean")
def test_a_dynamically_quantized_bert_imports(tmp_path):
    """The zoo's tiny BERT through torch's TorchScript exporter and quantize_dynamic: the model
    whose unsupported nodes once crashed the importer (ZeroDivisionError) imports and
    computes what ONNX Runtime computes."""
    torch = pytest.importorskip("torch")
    from onnxruntime.quantization import quantize_dynamic
    from looptune.testing import zoo
    if "bert_tiny" not in zoo.names():
        pytest.skip("bert_tiny left the zoo")
    net, inputs = zoo.build("bert_tiny")
    src, dst = tmp_path / "bert.onnx", tmp_path / "bert_q.onnx"
    torch.onnx.export(net, tuple(inputs), str(src), dynamo=False, opset_version=17)
    quantize_dynamic(src, dst, reduce_range=True)
    m = onnx.load(dst)
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= {n.op_type for n in m.graph.node}
    feeds = {i.name: t.numpy() for i, t in zip(m.graph.input, inputs)}
    want = run_ort(m, feeds)[0]
    got = evaluate(from_onnx(m), *as_graph_inputs(feeds))[0]
    assert np.abs(got.reshape(want.shape) - want).max() <= 5e-2 * np.ptp(want)
