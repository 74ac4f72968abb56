"""Post-training int8 quantization of a float32 model's linear layers and convolutions, into
the exact int32 form the ONNX quantized importer produces (frontend/onnx_quant.py), which
`prepare` then moves onto the CPU's u8 x s8 units (graph/quantized.py):

    q   = cast(clip(round(x / s_x) + z_x, 0, 255), int32)       x as uint8, round half to even
    acc = matmul(q - z_x, W_q)   or   conv2d(q - z_x, W_q)         exact, in int32
    y   = cast(acc, float32) * (s_x * s_w)                         s_w per output channel

W_q = clip(round(W / s_w), -127, 127) with s_w = max |W| / 127 per output channel (symmetric,
an int32 constant holding int8 values); s_x = (hi - lo) / 255 and z_x = round(-lo / s_x) for
[lo, hi] = [min(x, 0), max(x, 0)] (asymmetric, so that 0 is exact and a convolution's zero
padding of q - z_x is a padding of x with 0). `quantize_static`: lo and hi per tensor from
the values `calibrate` records over example inputs, for matmuls and convolutions with a
constant weight. `quantize_dynamic`: lo and hi computed from each call's x in the graph, as
ONNX's DynamicQuantizeLinear does (a transformer's activations vary too much from one input
to the next for fixed ranges), for matmuls with a constant weight only. A bias add and
every other operator stay float32; the scale and zero point are constant tensors, not
attributes, so layers of one shape remain one task whatever their ranges.
"""
from __future__ import annotations

import numpy as np

from .evaluate import evaluate, fold_constants
from .ir import Graph, GraphError, rebuild

QMAX_WEIGHT = 127  # symmetric int8 weights: [-127, 127]
QMAX_ACTIVATION = 255  # uint8 activations: [0, 255]


def _weight_of(node):
    """(the constant weight, its output-channel axis) of a matmul or convolution this module
    quantizes, else None."""
    if len(node.inputs) != 2 or node.inputs[0].dtype != "float32":
        return None
    w = node.inputs[1]
    if not w.is_const or w.dtype != "float32":
        return None
    if node.op == "matmul" and w.data.ndim == 2 and not node.attrs.get("transpose_a"):
        return w, 0 if node.attrs.get("transpose_b") else 1
    if node.op == "conv2d" and w.data.ndim == 4 and node.attrs.get("layout", "NCHW") == "NCHW" \
            and node.attrs.get("weight_layout", "KCRS") == "KCRS":
        return w, 0
    return None


def calibrate(graph: Graph, calibration: list) -> dict:
    """{name of an activation that a quantizable matmul or convolution reads: (lo, hi), its
    smallest and largest value over the `calibration` input tuples} (numpy evaluation)."""
    acts = list({id(n.inputs[0]): n.inputs[0] for n in graph.nodes
                 if _weight_of(n) is not None}.values())
    if not acts:
        return {}
    probe = Graph(graph.name, graph.inputs, graph.nodes, acts)
    ranges: dict = {}
    for k, inputs in enumerate(calibration):
        with np.errstate(all="ignore"):
            values = evaluate(probe, *inputs)
        for v, a in zip(acts, values):
            if not np.all(np.isfinite(a)):
                raise GraphError(f"calibration example {k}: %{v.name}, which a quantized layer "
                                 "reads, is not finite (NaN or infinity); calibrate on inputs "
                                 "the float32 model computes finite values for")
            lo, hi = ranges.get(v.name, (np.inf, -np.inf))
            ranges[v.name] = (min(lo, float(a.min())), max(hi, float(a.max())))
    return ranges


def activation_params(lo: float, hi: float) -> tuple:
    """(scale, zero point) of uint8 values covering [min(lo, 0), max(hi, 0)] (scale 1 where
    that is [0, 0]), in float32 as the graph computes with them."""
    lo, hi = np.float32(min(lo, 0.0)), np.float32(max(hi, 0.0))
    scale = (hi - lo) / np.float32(QMAX_ACTIVATION)
    if scale == 0:
        scale = np.float32(1)
    zp = int(np.clip(np.round(-lo / scale), 0, QMAX_ACTIVATION))
    return np.float32(scale), zp


def weight_params(w: np.ndarray, axis: int) -> tuple:
    """(w_q: int32 holding values in [-127, 127], scales: float32 per index of `axis`) with
    w ~= w_q * scales along `axis` (symmetric, per output channel)."""
    w = np.asarray(w, np.float32)
    others = tuple(d for d in range(w.ndim) if d != axis)
    scale = np.max(np.abs(w), axis=others, keepdims=True) / np.float32(QMAX_WEIGHT)
    scale = np.where(scale == 0, np.float32(1), scale).astype(np.float32)
    w_q = np.clip(np.round(w / scale), -QMAX_WEIGHT, QMAX_WEIGHT).astype(np.int32)
    return w_q, scale.reshape(-1)


def quantize_static(graph: Graph, calibration: list) -> Graph:
    """The graph with its constant-weight matmuls and convolutions in int8, activation ranges
    calibrated on `calibration` (a list of input tuples) (module docstring)."""
    from .simplify import fold_conv_affine
    graph = fold_conv_affine(graph)  # batch norms into the weights, before quantizing them
    return _quantize(graph, calibrate(graph, calibration))


def quantize_dynamic(graph: Graph) -> Graph:
    """The graph with its constant-weight matmuls in int8, each activation quantized with the
    range of the call's own values (module docstring)."""
    return _quantize(fold_constants(graph), None)


def _quantize(graph: Graph, ranges: dict | None) -> Graph:
    """The rewrite: static where `ranges` is given, else dynamic (matmuls only)."""
    shifted: dict = {}  # id(activation) -> (q - z_x, s_x): one quantization per tensor

    def rewrite(g, node, get):
        found = _weight_of(node)
        if found is None or (ranges is None and node.op != "matmul"):
            return None
        w, axis = found
        x = node.inputs[0]
        if id(x) not in shifted:
            if ranges is None:
                shifted[id(x)] = _quantize_dynamic(g, get(x), x.name + "_q")
            else:
                shifted[id(x)] = _quantize_static(g, get(x), x.name + "_q", *ranges[x.name])
        xq, s_x = shifted[id(x)]
        name = node.name
        w_q, s_w = weight_params(w.data, axis)
        if node.op == "matmul":  # the weight as [N][K], as the int8 units read it
            w_q = np.ascontiguousarray(w_q if axis == 0 else w_q.T)
            acc = g.op("matmul", xq, g.const(w.name + "_q", w_q), name=name, transpose_b=True)
            shape = (w_q.shape[0],)
        else:
            acc = g.op("conv2d", xq, g.const(w.name + "_q", w_q), name=name, **node.attrs)
            shape = (1, w_q.shape[0], 1, 1)
        f = g.op("cast", acc, name=name + "_float", dtype="float32")
        if isinstance(s_x, np.floating):
            m = g.const(name + "_multiplier", (s_x * s_w).reshape(shape))
        else:
            m = g.op("mul", s_x, g.const(name + "_w_scale", s_w.reshape(shape)),
                     name=name + "_multiplier")
        return g.op("mul", f, m, name=name + "_dequantized")
    return rebuild(graph, rewrite)


def _uint8(g, name, x, scale, zp_float):
    """cast(clip(round(x / scale) + zp, 0, 255), int32): ONNX's QuantizeLinear to uint8."""
    y = g.op("round", g.op("div", x, scale, name=name + "_div"), name=name + "_round")
    y = g.op("add", y, zp_float, name=name + "_plus_zp")
    y = g.op("clip", y, name=name + "_clip", min=0.0, max=float(QMAX_ACTIVATION))
    return g.op("cast", y, name=name, dtype="int32")


def _quantize_static(g, x, name, lo, hi):
    """(q - z_x, s_x) for the calibrated range [lo, hi] (q itself where z_x is 0)."""
    scale, zp = activation_params(lo, hi)
    q = _uint8(g, name, x, g.const(name + "_scale", np.asarray(scale, np.float32)),
               g.const(name + "_zp_float", np.asarray(zp, np.float32)))
    if zp == 0:
        return q, scale
    return g.op("sub", q, g.const(name + "_zp", np.asarray(zp, np.int32)),
                name=name + "_shift"), scale


def dynamic_range(op, const, x, name):
    """(scale, zero point as a rounded float32) of uint8 values computed from x per call, as
    ONNX's DynamicQuantizeLinear does: scale = (max(x, 0) - min(x, 0)) / 255 (1 where that is
    0: x all zeros), zero point clip(round(-min(x, 0) / scale), 0, 255). `op` and `const`
    build nodes and constants (a GraphBuilder's, or an importer's)."""
    axes = tuple(range(len(x.shape)))
    hi = op("maximum", op("max", x, name=name + "_max", axis=axes, keepdims=False),
            name=name + "_hi", scalar=0.0)
    lo = op("minimum", op("min", x, name=name + "_min", axis=axes, keepdims=False),
            name=name + "_lo", scalar=0.0)
    span = op("sub", hi, lo, name=name + "_span")
    flat = op("equal", span, name=name + "_flat", scalar=0.0)
    scale = op("where", flat, const(name + "_one", np.ones(1, np.float32)),
               op("div", span, name=name + "_step", scalar=float(QMAX_ACTIVATION)),
               name=name + "_scale")
    zp = op("sub", op("div", lo, scale, name=name + "_lo_steps"), name=name + "_zpf",
            scalar=0.0, reverse=True)
    zp = op("round", op("clip", zp, name=name + "_zpc", min=0.0, max=float(QMAX_ACTIVATION)),
            name=name + "_zpr")
    return scale, zp


def _quantize_dynamic(g, x, name):
    """(q - z_x, s_x) computed from x per call (dynamic_range)."""
    scale, zp = dynamic_range(g.op, g.const, x, name)
    q = _uint8(g, name, x, scale, zp)
    zp = g.op("cast", zp, name=name + "_zp", dtype="int32")
    return g.op("sub", q, zp, name=name + "_shift"), scale
