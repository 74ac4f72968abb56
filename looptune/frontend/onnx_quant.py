"""ONNX handlers (see onnx_ops.py) for quantized models, what onnxruntime.quantization's
quantize_static (QDQ and QOperator formats) and quantize_dynamic emit: the ONNX domain's
operators here, com.microsoft's in onnx_qlinear.py. A quantized tensor is an int32 tensor of
the graph that holds int8 / uint8 (or 16-bit) values, and the handlers compute what ONNX
Runtime computes with the graph's own operators:

    quantize(x)       = cast(clip(round(x / scale) + zp, lo, hi))     round: half to even
    dequantize(q)     = cast(q - zp) * scale                          (q - zp in int32)
    requantize(acc)   = cast(clip(round(float(acc) * (sa * sb / sy)) + zp, lo, hi))

Integer matrix products and convolutions accumulate exactly in int32, (a - za) @ (b - zb)
plus an int32 bias, then requantize. The com.microsoft operators that wrap a float one
(QLinearSigmoid, QLinearLeakyRelu, QLinearConcat) are quantize(op(dequantize(x))), as ONNX
Runtime's lookup tables compute them; QLinearAdd, QLinearMul, QLinearAveragePool and
QLinearSoftmax follow ONNX Runtime's own kernels (the zero point added before rounding, a
whole number of steps per 1), and so do a QDQ model's dequantize -> Add / Mul / AveragePool /
Softmax -> quantize groups, which ONNX Runtime runs as those operators. A QDQ model's
convolutions and matrix products stay float between their dequantize and quantize (ONNX
Runtime's integer kernels differ from them only where float rounding meets a tie), and a
dequantize stays cast(sub) then mul of the int32 tensor, so that a later rewrite finds it."""
from __future__ import annotations

import numpy as np

from ..graph.ir import Value
from .common import ImportError_
from .onnx_nn import _conv, _matmul
from .onnx_ops import _on, _opt

# the integer types of quantized tensors, and their ranges
_RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127),
           np.dtype(np.uint16): (0, 65535), np.dtype(np.int16): (-32768, 32767)}
_ONNX_INTS = {2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32}


# ------------------------------------------------------------------ types and parameters
def _known_type(imp, i):
    """The numpy type of the node's input i: a constant's own, else what the model declares
    or a translation declared (None if absent or unknown)."""
    names = imp.node.input
    if i >= len(names) or not names[i]:
        return None
    v = imp.env[names[i]]
    if v.is_const:
        return v.data.dtype
    elem = imp.type_of(names[i])[1]
    return np.dtype(_ONNX_INTS[elem]) if elem in _ONNX_INTS else (-1 if elem else None)


def _int_type(imp, name, *inputs, int32=False):
    """The integer type of the first of the node's inputs (quantized tensors and their zero
    points) whose type is known; refused when it is not 8 or 16 bits (or int32 where that is
    allowed), or when none is known."""
    for i in inputs:
        dtype = _known_type(imp, i)
        if dtype is None:
            continue
        if dtype in _RANGES or (int32 and dtype == np.int32):
            return dtype
        raise ImportError_(f"node {name}: the quantized type of {imp.node.input[i]} is "
                           f"{dtype if dtype != -1 else 'not an integer of 8 or 16 bits'}; "
                           "int8, uint8, int16 and uint16 are supported (4-bit and float8 "
                           "types are not): quantize the model to 8 bits")
    names = ", ".join(imp.node.input[i] for i in inputs if i < len(imp.node.input))
    raise ImportError_(f"node {name}: the element type of {names} is unknown (neither declared "
                       "nor found by ONNX's shape inference); give the model value_info for "
                       "it, or a zero point input")


def _typed(imp, y, dtype):
    """y, the node's quantized output, with its type declared for the nodes after it."""
    from onnx import helper
    imp.declare(imp.node.output[0], helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    return y


def _scale(imp, name, v, what):
    """A constant scale as float32; zero or not finite is refused, naming the node."""
    s = np.asarray(imp.array(v, what, name), np.float32)
    if s.size == 0 or not np.all(np.isfinite(s)) or np.any(s == 0):
        bad = s.reshape(-1)[~np.isfinite(s.reshape(-1)) | (s.reshape(-1) == 0)]
        raise ImportError_(f"node {name}: {what} is {bad[0] if bad.size else 'empty'}; a "
                           "quantization scale must be finite and nonzero (calibrate the "
                           "model again, e.g. on data that is not all zeros)")
    return s


def _check_scale(imp, name, v, what):
    """A scale operand: a constant one checked as `_scale` does, a computed one as it is."""
    if v is not None and v.is_const:
        _scale(imp, name, v, what)
    return v


def _axis_shape(name, n, axis, shape):
    """The shape that broadcasts a per-axis parameter of n values along `axis` of `shape`."""
    if axis is None or not shape or n != shape[axis]:
        along = f" along axis {axis} of size {shape[axis]}" if axis is not None and shape \
            else ""
        raise ImportError_(f"node {name}: a scale or zero point of {n} values does not fit a "
                           f"tensor of shape {tuple(shape)}{along}; give one value, or one "
                           "per element of the quantization axis")
    return tuple(n if d == axis else 1 for d in range(len(shape)))


def _param(imp, name, v, axis, shape, dtype):
    """A scale or zero point as the operand of an elementwise operator on a tensor of `shape`:
    a number when it is one constant value, else a tensor that broadcasts along `axis`."""
    if v is None:
        return None
    n = int(np.prod(v.shape, dtype=np.int64))
    if v.is_const:
        data = np.asarray(v.data).astype(dtype)
        if n == 1:
            return data.reshape(()).item()
        return imp.const(name, data.reshape(_axis_shape(name, n, axis, shape)))
    return v if n == 1 else imp.e.reshape(v, _axis_shape(name, n, axis, shape))


def _apply(imp, op, name, x, p):
    """x op p, p a number (scalar=; None is no-op) or a tensor."""
    if p is None:
        return x
    if isinstance(p, Value):
        return imp.op(op, x, p, name=name)
    return imp.op(op, x, name=name, scalar=float(p))


def _axis(name, at, rank):
    if at.get("block_size", 0):
        raise ImportError_(f"node {name}: blocked quantization (block_size) is not supported; "
                           "quantize per tensor or per channel")
    return int(at.get("axis", 1)) % rank if rank else None


# ------------------------------------------------------------------ the three conversions
def shift(imp, name, q, zp, axis=None):
    """q - zp in int32 (exact); q itself when the zero point is absent or 0."""
    q = imp.graph_value(q)  # a uint8 constant would fold in uint8, and wrap
    p = _param(imp, name + "_zp", zp, axis, q.shape, np.int32)
    if p is None or (not isinstance(p, Value) and p == 0):
        return q
    if not isinstance(p, Value):
        p = imp.const(name + "_zp", np.asarray(p, np.int32))
    return imp.op("sub", q, p, name=name)


def saturate(imp, name, v, zp, dtype, axis=None):
    """cast(clip(round(v) + zp, lo, hi)): the end of every quantization. Rounding comes before
    the zero point, as in ONNX Runtime's QuantizeLinear and requantization: round(2.5) + 1
    is 3, round(3.5) is 4."""
    lo, hi = _RANGES[dtype]
    y = imp.op("round", v, name=name + "_round")
    p = _param(imp, name + "_zp", zp, axis, v.shape, np.float32)
    if isinstance(p, Value) and p.dtype != "float32":
        p = imp.op("cast", p, name=name + "_zpf", dtype="float32")
    if p is not None and (isinstance(p, Value) or p != 0):
        y = _apply(imp, "add", name + "_zp", y, p)
    y = imp.op("clip", y, name=name + "_clip", min=float(lo), max=float(hi))
    return imp.op("cast", y, name=name, dtype="int32")


def quantize(imp, name, x, scale, zp, dtype, axis=None, *, zp_first=False):
    """saturate(round(x / scale) + zp). A division, as in ONNX Runtime: x * (1 / scale)
    rounds differently near ties. zp_first: round(x / scale + zp), as ONNX Runtime's
    quantized pooling rounds."""
    if x.dtype != "float32":
        x = imp.op("cast", x, name=name + "_in", dtype="float32")
    y = _apply(imp, "div", name + "_div", x,
               _param(imp, name + "_scale", scale, axis, x.shape, np.float32))
    if zp_first:
        y = _apply(imp, "add", name + "_zp", y, _param(imp, name + "_zp", zp, axis, x.shape,
                                                       np.float32))
        zp = None
    return saturate(imp, name, y, zp, dtype, axis)


def dequantize(imp, name, q, scale, zp, axis=None):
    """(q - zp) * scale: the difference in int32, the product in float32. A per-tensor one is
    remembered (imp.dequantized) for the groups ONNX Runtime runs as one operator."""
    s = _param(imp, name + "_scale", scale, axis, q.shape, np.float32)
    f = imp.op("cast", shift(imp, name + "_shift", q, zp, axis), name=name + "_float",
               dtype="float32")
    y = _apply(imp, "mul", name, f, s)
    if not isinstance(s, Value) and (zp is None or zp.is_const and zp.data.size == 1):
        z = 0 if zp is None else int(np.asarray(zp.data).reshape(-1)[0])
        imp.dequantized[id(y)] = (y, imp.graph_value(q), np.float32(s), z)  # y: kept alive
    return y


def requantize(imp, name, acc, multiplier, zp, dtype, axis):
    """An int32 accumulator to the output's type: saturate(round(float(acc) * multiplier) +
    zp), the multiplier (one value or one per element of `axis`) in float32 as ONNX Runtime
    computes it from the scales."""
    f = imp.op("cast", acc, name=name + "_float", dtype="float32")
    m = imp.const(name + "_multiplier", np.asarray(multiplier, np.float32))
    y = _apply(imp, "mul", name + "_scaled", f, _param(imp, name + "_multiplier", m, axis,
                                                       acc.shape, np.float32))
    return saturate(imp, name, y, zp, dtype)


# ------------------------------------------------------------------ the ONNX domain
def _output_type(imp, name, at, zp_input):
    """A QuantizeLinear's output type: its zero point's, else output_dtype (uint8 if none)."""
    if _known_type(imp, zp_input) is not None:
        return _int_type(imp, name, zp_input)
    to = int(at.get("output_dtype", 0)) or 2
    if to not in _ONNX_INTS or to == 6:
        raise ImportError_(f"node {name}: QuantizeLinear to element type {to} is not supported "
                           "(int8, uint8, int16 and uint16 are)")
    return np.dtype(_ONNX_INTS[to])


@_on("QuantizeLinear", "com.microsoft.QuantizeLinear")
def _quantize_linear(imp, name, ins, at):
    x, scale, zp = ins[0], _check_scale(imp, name, ins[1], "the scale"), _opt(ins, 2)
    dtype = _output_type(imp, name, at, 2)
    axis = _axis(name, at, len(x.shape))
    from .onnx_qlinear import as_qlinear_pool  # (it imports this module)
    y = as_qlinear_pool(imp, name, scale, zp, dtype)
    if y is None:
        y = _as_onnx_runtime_group(imp, name, x, scale, zp, dtype)
    if y is None:
        y = quantize(imp, name, x, scale, zp, dtype, axis)
    return _typed(imp, y, dtype)


@_on("DequantizeLinear", "com.microsoft.DequantizeLinear")
def _dequantize_linear(imp, name, ins, at):
    x, scale, zp = ins[0], ins[1], _opt(ins, 2)
    _int_type(imp, name, 0, 2, int32=True)
    axis = _axis(name, at, len(x.shape))
    return dequantize(imp, name, x, _check_scale(imp, name, scale, "the scale"), zp, axis)


@_on("DynamicQuantizeLinear")
def _dynamic_quantize_linear(imp, name, ins, at):
    """uint8 with scale = (max(x, 0) - min(x, 0)) / 255 (ONNX Runtime's 1 where that is 0:
    x all zeros) and zero point saturate(round(-min(x, 0) / scale))."""
    from ..graph.quantize import dynamic_range
    x = ins[0]
    scale, zp = dynamic_range(imp.op, imp.const, x, name)
    zp = imp.op("cast", zp, name=name + "_zp", dtype="int32")
    y = quantize(imp, name, x, scale, zp, np.dtype(np.uint8))
    return [y, imp.e.reshape(scale, ()), imp.e.reshape(zp, ())]


@_on("MatMulInteger")
def _matmul_integer(imp, name, ins, at):
    """(a - a_zero_point) @ (b - b_zero_point), exactly, in int32 (zero points per tensor, per
    row of a, per column of b)."""
    a, b = ins[0], ins[1]
    _int_type(imp, name, 0, 2)
    _int_type(imp, name, 1, 3)
    a = shift(imp, name + "_a", a, _opt(ins, 2), max(len(a.shape) - 2, 0))
    b = shift(imp, name + "_b", b, _opt(ins, 3), len(b.shape) - 1)
    return _matmul(imp, name, [a, b], {})


@_on("ConvInteger")
def _conv_integer(imp, name, ins, at):
    """conv(x - x_zero_point, w - w_zero_point) in int32: padding with x's zero point, as
    ONNX Runtime does, is padding the difference with 0 (w's zero point per output
    channel)."""
    x, w = ins[0], ins[1]
    _int_type(imp, name, 0, 2)
    _int_type(imp, name, 1, 3)
    return _conv(imp, name, [shift(imp, name + "_x", x, _opt(ins, 2)),
                             shift(imp, name + "_w", w, _opt(ins, 3), 0)], at)


@_on("QLinearMatMul")
def _qlinear_matmul(imp, name, ins, at):
    """(a - za) @ (b - zb) in int32, requantized by a_scale * b_scale / y_scale (b's scale
    and zero point per tensor or per column)."""
    a, sa, za, b, sb, zb, sy, zy = ins[:8]
    dtype = _int_type(imp, name, 7, 0, 2)
    _int_type(imp, name, 3, 5)
    sa, sy = _scale(imp, name, sa, "a_scale"), _scale(imp, name, sy, "y_scale")
    if sa.size != 1 or sy.size != 1:
        raise ImportError_(f"node {name}: QLinearMatMul with a per-row a_scale (or a y_scale of "
                           "several values) is not supported; quantize a per tensor")
    sb = _scale(imp, name, sb, "b_scale").reshape(-1)
    acc = _matmul(imp, name + "_acc", [shift(imp, name + "_a", a, za, max(len(a.shape) - 2, 0)),
                                       shift(imp, name + "_b", b, zb, len(b.shape) - 1)], {})
    multiplier = sa.reshape(()) * sb / sy.reshape(())
    return _typed(imp, requantize(imp, name, acc, multiplier, zy, dtype, len(acc.shape) - 1),
                  dtype)


@_on("QLinearConv")
def _qlinear_conv(imp, name, ins, at):
    """conv(x - zx, w - zw) + bias in int32 (the bias int32, already in x_scale * w_scale
    units), requantized by x_scale * w_scale / y_scale (w's per output channel or not)."""
    x, sx, zx, w, sw, zw, sy, zy = ins[:8]
    dtype = _int_type(imp, name, 7, 0, 2)
    _int_type(imp, name, 3, 5)
    sx, sy = _scale(imp, name, sx, "x_scale"), _scale(imp, name, sy, "y_scale")
    if sx.size != 1 or sy.size != 1:
        raise ImportError_(f"node {name}: QLinearConv's x_scale and y_scale must be one value "
                           "each (per-tensor activations)")
    sw = _scale(imp, name, sw, "w_scale").reshape(-1)
    bias = _opt(ins, 8)
    acc = _conv(imp, name + "_acc", [shift(imp, name + "_x", x, zx),
                                     shift(imp, name + "_w", w, zw, 0)]
                + ([bias] if bias is not None else []), at)
    multiplier = sx.reshape(()) * sw / sy.reshape(())
    return _typed(imp, requantize(imp, name, acc, multiplier, zy, dtype, 1), dtype)


# ------------------------------------------------------------------ ONNX Runtime's own kernels
def _quantize_probabilities(imp, name, p, scale, zp, dtype):
    """A softmax's output quantized as ONNX Runtime's QLinearSoftmax does it:
    saturate(round(p * floor(1 / scale)) + zp), a whole number of steps per 1."""
    steps = np.floor(np.float32(1) / _scale(imp, name, scale, "the output scale").reshape(()))
    y = imp.op("mul", p, name=name + "_steps", scalar=float(steps))
    return saturate(imp, name, y, zp, dtype)


def fused_by_onnx_runtime(imp, dtype, ops):
    """The ONNX node (of one of `ops`) that makes the input of the QuantizeLinear being
    translated, to `dtype`, where ONNX Runtime fuses the two and the DequantizeLinear nodes
    that feed it into one of its QLinear operators, as its QDQ selectors do: every input of
    the node dequantized from the same 8-bit type as the output's, the node read by this
    QuantizeLinear alone; None where it does not."""
    from onnx import helper
    node, reads = imp.uses(imp.node.input[0])
    if node is None or node.domain not in ("", "ai.onnx") or node.op_type not in ops \
            or reads != 1 or dtype not in (np.dtype(np.int8), np.dtype(np.uint8)):
        return None
    outputs = {o.name for o in imp.graph.output}
    for i in node.input:
        dq, _ = imp.uses(i)
        if dq is None or dq.op_type != "DequantizeLinear" or dq.domain not in ("", "ai.onnx") \
                or dq.output[0] in outputs \
                or imp.type_of(dq.input[0])[1] != helper.np_dtype_to_tensor_dtype(dtype):
            return None
    return node


def _as_onnx_runtime_group(imp, name, x, scale, zp, dtype):
    """x quantized as ONNX Runtime computes dequantize -> Softmax / Add / Mul -> quantize of
    per-tensor 8-bit values where it fuses them (fused_by_onnx_runtime) into one
    QLinearSoftmax / QLinearAdd / QLinearMul with rounding of their own (pooling:
    onnx_qlinear.as_qlinear_pool); None for anything else."""
    p = x.producer
    if fused_by_onnx_runtime(imp, dtype, ("Softmax", "Add", "Mul")) is None:
        return None
    if p is None or p.op not in ("softmax", "add", "mul") or not scale.is_const \
            or scale.data.size != 1 or dtype not in (np.dtype(np.int8), np.dtype(np.uint8)) \
            or (zp is not None and (not zp.is_const or zp.data.size != 1)):
        return None
    sources = [imp.dequantized.get(id(v)) for v in p.inputs]
    if None in sources:
        return None
    if p.op == "softmax":
        return _quantize_probabilities(imp, name, x, scale, zp, dtype)
    if len(sources) != 2 or p.attrs:
        return None
    (_, a, sa, za), (_, b, sb, zb) = sources
    sc = _scale(imp, name, scale, "the scale").reshape(())
    zc = 0 if zp is None else int(zp.data.reshape(-1)[0])
    fused = _qlinear_add_as_ort if p.op == "add" else _qlinear_mul_as_ort
    return fused(imp, name, a, b, (sa, sb, sc), (za, zb, zc), dtype)


def _qlinear_add_as_ort(imp, name, a, b, scales, zps, dtype):
    """saturate(round(a * sa/sc + b * sb/sc + (zc - (sa/sc * za + sb/sc * zb)))): ONNX
    Runtime's x86 kernel, the zero point added before rounding."""
    (sa, sb, sc), (za, zb, zc) = scales, (np.float32(z) for z in zps)
    ra, rb = sa / sc, sb / sc
    fixed = zc - (ra * za + rb * zb)
    fa = imp.op("mul", imp.op("cast", a, name=name + "_a", dtype="float32"), name=name + "_ra",
                scalar=float(ra))
    fb = imp.op("mul", imp.op("cast", b, name=name + "_b", dtype="float32"), name=name + "_rb",
                scalar=float(rb))
    y = imp.op("add", fa, imp.op("add", fb, name=name + "_fixed", scalar=float(fixed)),
               name=name + "_sum")
    return saturate(imp, name, y, None, dtype)


def _qlinear_mul_as_ort(imp, name, a, b, scales, zps, dtype):
    """saturate(round(float((a - za) * (b - zb)) * (sa * sb / sc) + zc)): ONNX Runtime's x86
    kernel, the product exact in int32 and the zero point added before rounding."""
    (sa, sb, sc), (za, zb, zc) = scales, zps
    a, b = (shift(imp, name + w, v, imp.const(name + w + "_zp", np.asarray(z, np.int32)))
            for w, v, z in (("_a", a, za), ("_b", b, zb)))
    prod = imp.op("mul", a, b, name=name + "_ab")
    y = imp.op("mul", imp.op("cast", prod, name=name + "_float", dtype="float32"),
               name=name + "_scaled", scalar=float(sa * sb / sc))
    y = imp.op("add", y, name=name + "_zc", scalar=float(zc))
    return saturate(imp, name, y, None, dtype)
