"""A QDQ model's convolutions and matrix products as integer ones.

onnxruntime.quantization's QDQ format keeps float operators between DequantizeLinear and
QuantizeLinear nodes: Conv(DQ(x_q), DQ(w_q), DQ(b_q)) -> Q. ONNX Runtime runs such a group
as one integer kernel (QLinearConv, QLinearMatMul); so does looptune: where the activation
is a per-tensor dequantized value (onnx_quant.dequantize remembers it) and the weight a
dequantized constant (remembered here when the importer folds its DequantizeLinear), the
operator becomes

    acc = op(x_q - x_zp, w_q - w_zp)     in int32, exact (the int32 bias added as ONNX
                                         Runtime adds it when its scale is x_scale * w_scale)
    y   = float(acc) * (x_scale * w_scale)   per output channel, then any float bias

and graph/quantized.py moves `acc` onto the CPU's u8 x s8 units. The float value differs from
the float operator's only in rounding (the integer sum is exact where the float one rounds),
so the QuantizeLinear after it lands within one step of ONNX Runtime's, as on its own
integer path. Anything else (a weight computed at run time, a per-channel activation, a
weight quantized along another axis) stays the float operator it was.
"""
from __future__ import annotations

import numpy as np


def remember_weight(imp, ins, attrs, out) -> None:
    """Record a folded DequantizeLinear of constants: (its integer values, scale, zero
    point, axis) under the folded Value `out`."""
    q, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 else None
    if not (q.is_const and scale.is_const and (zp is None or zp.is_const)):
        return
    data = np.asarray(q.data)
    if not np.issubdtype(data.dtype, np.integer) or data.ndim == 0:
        return
    axis = int(attrs.get("axis", 1)) % data.ndim
    z = np.zeros(1, np.int64) if zp is None else np.asarray(zp.data, np.int64).reshape(-1)
    imp.quantized_consts[id(out)] = (out, data.astype(np.int64),
                                     np.asarray(scale.data, np.float32).reshape(-1), z, axis)


def _weight(imp, v, axis: int):
    """(w_q - w_zp as int32, the scale per element of `axis` or one) of a remembered
    constant quantized per tensor or along `axis`; None otherwise."""
    found = imp.quantized_consts.get(id(v))
    if found is None:
        return None
    _, q, scale, zp, q_axis = found
    if scale.size != 1 and q_axis != axis or zp.size not in (1, scale.size):
        return None
    shape = [1] * q.ndim
    if zp.size > 1:
        shape[axis] = zp.size
    diff = q - zp.reshape(shape)
    if diff.min() < np.iinfo(np.int32).min or diff.max() > np.iinfo(np.int32).max:
        return None
    return diff.astype(np.int32), scale


def _activation(imp, x):
    """(q, zero point as a Value or None, scale) of a per-tensor dequantized activation."""
    found = imp.dequantized.get(id(x))
    if found is None:
        return None
    _, q, scale, zp = found
    return q, zp, np.float32(scale)


def _shift(imp, name, q, zp):
    if not zp:
        return q
    return imp.op("sub", q, imp.const(name + "_zp", np.asarray([zp], np.int32)), name=name)


def _bias(imp, b, scale):
    """An int32 constant of a bias quantized with `scale` (per output channel), or None."""
    if b is None:
        return None
    found = imp.quantized_consts.get(id(b))
    if found is None:
        return None
    _, q, b_scale, zp, _ = found
    if q.ndim != 1 or np.any(zp) or b_scale.size not in (1, q.size) \
            or np.any(np.broadcast_to(b_scale, scale.shape) != scale) \
            or q.min() < np.iinfo(np.int32).min or q.max() > np.iinfo(np.int32).max:
        return None
    return q.astype(np.int32)


def _rescale(imp, name, acc, scale, axis):
    """float(acc) * scale, the scale one value or one per element of `axis`."""
    y = imp.op("cast", acc, name=name + "_float", dtype="float32")
    if scale.size == 1:
        return imp.op("mul", y, name=name + "_dequantized", scalar=float(scale.reshape(())))
    shape = [1] * len(acc.shape)
    shape[axis] = scale.size
    return imp.op("mul", y, imp.const(name + "_scale", scale.reshape(shape)),
                  name=name + "_dequantized")


def integer_conv(imp, name, ins, at, conv):
    """Conv(DQ(x), DQ(w)[, DQ(b) or b]) as an integer convolution (module docstring), or None.
    `conv` is the Conv handler, which builds the int32 convolution."""
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    act, weight = _activation(imp, x), _weight(imp, w, 0)
    if act is None or weight is None:
        return None
    (q, zp, sx), (wq, sw) = act, weight
    scale = (sx * sw).astype(np.float32)
    scale = scale if scale.size == wq.shape[0] else np.broadcast_to(scale, (wq.shape[0],))
    bias = _bias(imp, b, scale)
    args = [_shift(imp, name + "_x", q, zp), imp.const(name + "_w", wq)]
    if bias is not None:
        args.append(imp.const(name + "_b", bias))
    acc = conv(imp, name + "_acc", args, at)
    one = scale if np.any(scale != scale[0]) else scale[:1]
    y = _rescale(imp, name, acc, one, 1)
    if b is not None and bias is None:
        y = imp.op("add", y, imp.e.reshape(b, (1, b.shape[0]) + (1,) * (len(y.shape) - 2)),
                   name=name + "_bias")
    return y


def integer_matmul(imp, name, a, b, matmul, transpose_b=False):
    """MatMul(DQ(a), DQ(b)) (or Gemm's product, b (N, K) with transpose_b) as an integer
    matrix product, or None. `matmul(a, b)` builds the int32 product."""
    if len(b.shape) != 2:
        return None
    act, weight = _activation(imp, a), _weight(imp, b, 0 if transpose_b else 1)
    if act is None or weight is None:
        return None
    (q, zp, sa), (wq, sb) = act, weight
    if transpose_b:
        wq = np.ascontiguousarray(wq.T)
    acc = matmul(_shift(imp, name + "_a", q, zp), imp.const(name + "_b", wq))
    scale = (sa * sb).astype(np.float32)
    one = scale if np.any(scale != scale[0]) else scale[:1]
    return _rescale(imp, name, acc, one, len(acc.shape) - 1)
