"""Translations of the quantized_decomposed operators of a model quantized with PT2E
(prepare_pt2e / convert_pt2e, torchao's or older torch.ao's; the X86 inductor quantizer),
computing what their torch implementations compute. As in onnx_quant.py, a quantized tensor
is an int32 tensor of the graph that holds 8-bit (or 16-bit) values:

    quantize(x)      = cast(clip(round(x * (1 / scale)) + zp, qmin, qmax))   round: half to even
    dequantize(q)    = cast(q - zp) * scale                                  (q - zp in int32)
    choose_qparams   = scale max((max(x, 0) - min(x, 0)) / (qmax - qmin), eps),
                       zero point clip(qmin - round(min(x, 0) / scale), qmin, qmax)

torch multiplies by the float32 reciprocal of the scale where ONNX Runtime divides by it;
the two round differently near ties. A linear or convolution of a dequantized activation (per
tensor) and a dequantized constant weight (per tensor or per output channel) is an exact int32
matmul or convolution of the differences (q - zp), scaled per output channel (`int8_linear`,
`int8_conv`), which graph/quantized.py then puts on the int8 units. Anything else (a weight
computed at run time, quantized along its input channels) stays the float operator of the
dequantized values.
"""
from __future__ import annotations

import numpy as np

from ..graph.ir import Value
from .common import ImportError_
from .torch_ops import cast, on

NS = "quantized_decomposed."
# the quantized types and their ranges (torch's 32-bit and float8 ones are refused)
RANGES = {"torch.uint8": (0, 255), "torch.int8": (-128, 127), "torch.uint16": (0, 65535),
          "torch.int16": (-32768, 32767)}
DEQUANTIZE = {NS + "dequantize_per_tensor." + o for o in ("default", "tensor", "tensor2")} | \
    {NS + "dequantize_per_channel.default"}


def _keys(op, *overloads):
    return [f"{NS}{op}.{o}" for o in overloads]


def _number(v):
    """A number, or a constant of one value, as a Python number; None for a computed value."""
    if isinstance(v, Value):
        return v.data.reshape(-1)[0].item() if v.is_const and v.data.size == 1 else None
    return v


def _range(name, dtype, qmin, qmax) -> tuple:
    if str(dtype) not in RANGES:
        raise ImportError_(f"node {name}: quantization to {dtype} is not supported; int8, "
                           "uint8, int16 and uint16 are")
    qmin, qmax = _number(qmin), _number(qmax)
    lo, hi = RANGES[str(dtype)]
    if qmin is None or qmax is None or not lo <= qmin <= qmax <= hi:
        raise ImportError_(f"node {name}: quant_min {qmin} and quant_max {qmax} are not "
                           f"constants within {dtype}'s range [{lo}, {hi}]")
    return int(qmin), int(qmax)


def _scale(name, s):
    """A scale checked finite and nonzero: a number as it is (torch takes 1.0 / scale in
    double), a constant as float32, a computed one unchecked."""
    if isinstance(s, Value) and not s.is_const:
        return s
    data = np.asarray(s.data if isinstance(s, Value) else s, np.float32).reshape(-1)
    bad = data[~np.isfinite(data) | (data == 0)]
    if data.size == 0 or bad.size:
        raise ImportError_(f"node {name}: the scale is {bad[0] if bad.size else 'empty'}; a "
                           "quantization scale must be finite and nonzero (calibrate the model "
                           "again, on inputs that are not all zeros)")
    return float(s) if isinstance(s, (int, float)) else data


def _along(e, name, p, axis, shape, dtype):
    """A per-tensor parameter as a number (or a computed value of one element), a per-channel
    one as a tensor that broadcasts along `axis` of a tensor of `shape`."""
    if p is None or isinstance(p, (int, float)):
        return p
    if isinstance(p, Value) and not p.is_const:
        n = p.type.size
        return p if n == 1 else e.reshape(p, _axis_shape(name, n, axis, shape))
    data = np.asarray(p.data if isinstance(p, Value) else p).astype(dtype).reshape(-1)
    if data.size == 1:
        return data[0].item()
    return e.const(name, data.reshape(_axis_shape(name, data.size, axis, shape)))


def _axis_shape(name, n, axis, shape):
    if axis is None or n != shape[axis]:
        raise ImportError_(f"node {name}: {n} scales or zero points for a tensor of shape "
                           f"{tuple(shape)} along axis {axis}")
    return tuple(n if d == axis else 1 for d in range(len(shape)))


def _apply(e, op, name, x, p):
    """x op p: p a number (scalar=) or a tensor; None or (for add and sub) 0 is no-op."""
    if p is None or (op in ("add", "sub") and not isinstance(p, Value) and p == 0):
        return x
    if isinstance(p, Value):
        return e.op(op, x, p, name=name)
    return e.op(op, x, name=name, scalar=float(p))


# ------------------------------------------------------------------ the conversions
def quantize(e, name, x, scale, zp, qrange, axis=None):
    """cast(clip(round(x * (1 / scale)) + zp, qmin, qmax)): the reciprocal in float32, as
    torch computes it (1.0 / scale in double for a per-tensor scale, in float32 per channel:
    the same float32 value), the zero point added after rounding."""
    x = cast(e, x, "float32", name + "_in")
    s = _along(e, name + "_scale", scale, axis, x.shape, np.float32)
    if isinstance(s, Value) and s.is_const:
        inv = e.const(name + "_inv_scale", np.float32(1) / s.data)
    elif isinstance(s, Value):
        inv = e.op("div", s, name=name + "_inv_scale", scalar=1.0, reverse=True)
    else:
        inv = float(np.float32(1.0 / s))
    y = e.op("round", _apply(e, "mul", name + "_scaled", x, inv), name=name + "_round")
    z = _along(e, name + "_zp", zp, axis, x.shape, np.float32)
    if isinstance(z, Value) and z.dtype != "float32":
        z = e.op("cast", z, name=name + "_zpf", dtype="float32")
    y = _apply(e, "add", name + "_zp", y, z)
    y = e.op("clip", y, name=name + "_clip", min=float(qrange[0]), max=float(qrange[1]))
    return e.op("cast", y, name=name, dtype="int32")


def shift(e, name, q, zp, axis=None):
    """q - zp in int32 (exact); q itself for a zero point of 0 or None."""
    z = _along(e, name + "_zp", zp, axis, q.shape, np.int32)
    if z is None or (not isinstance(z, Value) and z == 0):
        return q
    if not isinstance(z, Value):
        z = e.const(name + "_zp", np.full((1,), z, np.int32))
    return e.op("sub", q, cast(e, z, "int32", name + "_zpi"), name=name)


def dequantize(e, name, q, scale, zp, axis=None):
    """cast(q - zp) * scale: the difference in int32 (what a later rewrite finds), the
    product in float32; torch's (float(q) - zp) * scale is the same for 8- and 16-bit q."""
    f = e.op("cast", shift(e, name + "_shift", q, zp, axis), name=name + "_float",
             dtype="float32")
    s = _along(e, name + "_scale", scale, axis, q.shape, np.float32)
    return _apply(e, "mul", name, f, s if isinstance(s, Value) else float(np.float32(s)))


# ------------------------------------------------------------------ the handlers
def _out_dtype(name, out_dtype):
    if out_dtype is not None and str(out_dtype) != "torch.float32":
        raise ImportError_(f"node {name}: dequantize to {out_dtype} is not supported; "
                           "dequantize to float32 (out_dtype=None)")


@on(*_keys("quantize_per_tensor", "default", "tensor", "tensor2"))
def _quantize_per_tensor(e, name, x, scale, zp, qmin, qmax, dtype):
    return quantize(e, name, x, _scale(name, scale), zp, _range(name, dtype, qmin, qmax))


@on(*_keys("dequantize_per_tensor", "default", "tensor", "tensor2"))
def _dequantize_per_tensor(e, name, q, scale, zp, qmin, qmax, dtype, out_dtype=None):
    _range(name, dtype, qmin, qmax)
    _out_dtype(name, out_dtype)
    return dequantize(e, name, q, _scale(name, scale), zp)


@on(*_keys("quantize_per_channel", "default"))
def _quantize_per_channel(e, name, x, scales, zps, axis, qmin, qmax, dtype):
    axis = int(axis) % len(x.shape)
    return quantize(e, name, x, _scale(name, scales), zps, _range(name, dtype, qmin, qmax),
                    axis)


@on(*_keys("dequantize_per_channel", "default"))
def _dequantize_per_channel(e, name, q, scales, zps, axis, qmin, qmax, dtype, out_dtype=None):
    _range(name, dtype, qmin, qmax)
    _out_dtype(name, out_dtype)
    return dequantize(e, name, q, _scale(name, scales), zps, int(axis) % len(q.shape))


@on(*_keys("choose_qparams", "tensor"))
def _choose_qparams(e, name, x, qmin, qmax, eps, dtype):
    """torch's determine_qparams for per_tensor_affine (module docstring), as (scale, zero
    point) of one element each; the divisions in float32, as torch's."""
    qmin, qmax = _range(name, dtype, qmin, qmax)
    axes = tuple(range(len(x.shape)))
    x = cast(e, x, "float32", name + "_in")
    hi = e.op("maximum", e.op("max", x, name=name + "_max", axis=axes, keepdims=False),
              name=name + "_hi", scalar=0.0)
    lo = e.op("minimum", e.op("min", x, name=name + "_min", axis=axes, keepdims=False),
              name=name + "_lo", scalar=0.0)
    span = e.op("div", e.op("sub", hi, lo, name=name + "_span"), name=name + "_step",
                scalar=float(qmax - qmin))
    scale = e.op("maximum", span, name=name + "_scale", scalar=float(np.float32(eps)))
    steps = e.op("round", e.op("div", lo, scale, name=name + "_lo_steps"), name=name + "_round")
    zp = e.op("clip", e.op("sub", steps, name=name + "_zpf", scalar=float(qmin), reverse=True),
              name=name + "_clip", min=float(qmin), max=float(qmax))
    zp = e.op("cast", zp, name=name + "_zp", dtype="int32")
    return e.reshape(scale, (1,)), e.reshape(zp, (1,))


def _refuse(what):
    def h(e, name, *args, **kwargs):
        raise ImportError_(f"node {name}: {what} is not supported; quantize per tensor or per "
                           "channel (the X86 inductor quantizer's static or dynamic configs)")
    return h


for _op in ("quantize_per_token", "dequantize_per_token", "choose_qparams_per_token",
            "choose_qparams_per_token_asymmetric"):
    on(*_keys(_op, "default"))(_refuse("per-token quantization"))
for _op in ("quantize_per_channel_group", "dequantize_per_channel_group"):
    on(*_keys(_op, "default"))(_refuse("grouped (blockwise) quantization"))


# ------------------------------------------------------------------ integer linear layers
def _dequantized(e, node):
    """(q, scale, zp, axis, (qmin, qmax)) of an FX node that dequantizes 8-bit values to
    float32, its operands as the handlers get them (None for any other node)."""
    if getattr(node, "op", None) != "call_function" or str(node.target) not in DEQUANTIZE:
        return None
    if node.kwargs.get("out_dtype") is not None and str(node.kwargs["out_dtype"]) != \
            "torch.float32":
        return None
    args = [e.value_of(a) for a in node.args]
    if "per_channel" in str(node.target):
        (q, scale, zp, axis, qmin, qmax, dtype), axis = args[:7], int(args[3])
    else:
        (q, scale, zp, qmin, qmax, dtype), axis = args[:6], None
    if str(dtype) not in ("torch.uint8", "torch.int8") or not isinstance(q, Value):
        return None
    return q, scale, zp, axis, _range(str(node), dtype, qmin, qmax)


def _integer_operands(e, name):
    """(qx, zx, sx, wi, sw) of a node whose first two arguments are a per-tensor dequantized
    activation and a constant dequantized per tensor or along axis 0 (output channels): wi
    the weight's qw - zw (int64), sw its float32 scales (one, or one per output channel);
    None for any other node, and where an int32 sum of products could overflow."""
    args = e.node.args
    act, weight = _dequantized(e, args[0]), _dequantized(e, args[1])
    if act is None or weight is None or act[3] is not None:
        return None
    qx, sx, zx, _, (xmin, xmax) = act
    qw, sw, zw, w_axis, _ = weight
    if not qw.is_const or w_axis not in (None, 0) or any(
            isinstance(v, Value) and not v.is_const for v in (sw, zw)):
        return None
    zw = np.zeros(1) if zw is None else np.asarray(zw.data if isinstance(zw, Value) else zw)
    wi = qw.data.astype(np.int64) - zw.astype(np.int64).reshape((-1,) + (1,) * (qw.data.ndim - 1))
    terms = int(np.prod(qw.shape[1:]))  # products in one output value's sum
    if terms * (xmax - xmin) * max(int(np.abs(wi).max()), 1) >= 2 ** 31:
        return None
    return qx, zx, _scale(name, sx), wi, np.asarray(_scale(name, sw), np.float32).reshape(-1)


def _rescale(e, name, acc, sx, sw, axis):
    """float(acc) * sx * sw, sw one value or one per element of `axis` of acc."""
    y = e.op("cast", acc, name=name + "_float", dtype="float32")
    per_channel = tuple(sw.size if d == axis else 1 for d in range(len(acc.shape)))
    if isinstance(sx, Value):  # computed per call (dynamic quantization)
        y = _apply(e, "mul", name + "_wscale", y, _along(e, name + "_sw", sw, axis, per_channel,
                                                          np.float32))
        return e.op("mul", y, sx, name=name + "_scaled")
    return _apply(e, "mul", name + "_scaled", y, _along(
        e, name + "_multiplier", np.float32(sx) * sw, axis, per_channel, np.float32))


def int8_linear(e, name, x, b):
    """linear(dequantize(qx), dequantize(qw), b), qx per tensor and qw a constant per tensor
    or per output channel, as an exact int32 matmul scaled per output column:

        y = float((qx - zx) @ (qw - zw)^T) * (sx * sw) + b

    (torch computes the float product of the dequantized operands: the same but for float32
    rounding). None for any other linear."""
    found = _integer_operands(e, name)
    if found is None or len(found[3].shape) != 2:
        return None
    qx, zx, sx, wi, sw = found
    n, k = wi.shape
    lead = x.shape[:-1]
    a = e.reshape(shift(e, name + "_x", qx, zx), (int(np.prod(lead)), k))
    acc = e.op("matmul", a, e.const(name + "_w", wi.astype(np.int32)), name=name + "_int",
               transpose_b=True)
    y = _rescale(e, name, acc, sx, sw, 1)
    if b is not None:
        y = e.op("add", y, b, name=name + "_bias")
    return e.reshape(y, lead + (n,))


def int8_conv(e, name, b, conv, **attrs):
    """conv(dequantize(qx), dequantize(qw), b) as `int8_linear` does a linear: an exact int32
    convolution of the differences (padding the difference with 0 is padding qx with its zero
    point, as torch pads the dequantized input with 0.0), scaled per output channel, plus b.
    `conv(e, name, x, w, **attrs)` builds the convolution."""
    found = _integer_operands(e, name)
    if found is None:
        return None
    qx, zx, sx, wi, sw = found
    acc = conv(e, name + "_int", shift(e, name + "_x", qx, zx),
               e.const(name + "_w", wi.astype(np.int32)), **attrs)
    y = _rescale(e, name, acc, sx, sw, 1)
    if b is not None:
        y = e.op("add", y, e.reshape(b, (1, b.shape[0]) + (1,) * (len(y.shape) - 2)),
                 name=name + "_bias")
    return y
