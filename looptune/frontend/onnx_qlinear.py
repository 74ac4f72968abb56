"""ONNX handlers (see onnx_ops.py) for the com.microsoft quantized operators that
quantize_static's QOperator format emits, in the conversions of onnx_quant.py: QGemm, and the
QLinear operators that have no ONNX counterpart (Add, Mul, Sigmoid, LeakyRelu, Softmax,
AveragePool, GlobalAveragePool, Concat)."""
from __future__ import annotations

import numpy as np

from .common import ImportError_
from .onnx_nn import _pads
from .onnx_ops import HANDLERS, _on, _opt
from .onnx_quant import (_check_scale, _int_type, _qlinear_add_as_ort, _qlinear_mul_as_ort,
                         _quantize_probabilities, _scale, _typed, dequantize,
                         fused_by_onnx_runtime, quantize, requantize, shift)


@_on("com.microsoft.QGemm")
def _qgemm(imp, name, ins, at):
    """(A - za) @ (B - zb) + C in int32 (C is int32, already in a_scale * b_scale units), then
    times alpha * a_scale * b_scale (per column of B or not): requantized by y_scale when
    there is one, else the float output."""
    a, sa, za, b, sb, zb = ins[:6]
    c, sy, zy = _opt(ins, 6), _opt(ins, 7), _opt(ins, 8)
    _int_type(imp, name, 0, 2)
    _int_type(imp, name, 3, 5)
    sa = _scale(imp, name, sa, "a_scale")
    if sa.size != 1:
        raise ImportError_(f"node {name}: QGemm with a per-row a_scale is not supported")
    sb = _scale(imp, name, sb, "b_scale").reshape(-1)
    trans_b = bool(at.get("transB", 0))
    if at.get("transA", 0):
        a = imp.op("transpose", a, name=name + "_ta", perm=(1, 0))
    a = shift(imp, name + "_a", a, za)
    b = shift(imp, name + "_b", b, zb, 0 if trans_b else 1)
    acc = imp.op("matmul", a, b, name=name + "_acc", transpose_b=trans_b)
    if c is not None:
        acc = imp.op("add", acc, c, name=name + "_c")
    scale = np.float32(at.get("alpha", 1.0)) * sa.reshape(()) * sb
    if sy is None:
        return dequantize(imp, name, acc, imp.const(name + "_scale", scale), None,
                          len(acc.shape) - 1)
    sy, dtype = _scale(imp, name, sy, "y_scale"), _int_type(imp, name, 8, 0, 2)
    return _typed(imp, requantize(imp, name, acc, scale / sy.reshape(()), zy, dtype,
                                  len(acc.shape) - 1), dtype)


def _wrapped(op_name, float_op):
    """A com.microsoft operator X, x_scale, x_zp, y_scale, y_zp (zero points optional) that is
    quantize(float_op(dequantize(x)))."""
    def h(imp, name, ins, at):
        x, sx, zx, sy, zy = (_opt(ins, i) for i in range(5))
        dtype = _int_type(imp, name, 4, 0, 2)
        f = dequantize(imp, name + "_x", x, _check_scale(imp, name, sx, "X_scale"), zx)
        y = float_op(imp, name + "_" + op_name, f, at)
        return _typed(imp, quantize(imp, name, y, _check_scale(imp, name, sy, "Y_scale"), zy,
                                    dtype), dtype)
    return h


HANDLERS["com.microsoft.QLinearSigmoid"] = _wrapped(
    "sigmoid", lambda imp, name, x, at: imp.op("sigmoid", x, name=name))
HANDLERS["com.microsoft.QLinearLeakyRelu"] = _wrapped(
    "leaky_relu", lambda imp, name, x, at: imp.op("leaky_relu", x, name=name,
                                                  alpha=float(at.get("alpha", 0.01))))


@_on("com.microsoft.QLinearSoftmax")
def _qlinear_softmax(imp, name, ins, at):
    """softmax(dequantize(x)) along `axis`, to the output's type as ONNX Runtime does it:
    saturate(round(p * floor(1 / y_scale)) + zp), a whole number of steps per 1 (the opset-12
    form, over the axes from `axis` on, only where that is the last axis: the same there)."""
    x, sx, zx, sy, zy = (_opt(ins, i) for i in range(5))
    dtype = _int_type(imp, name, 4, 0, 2)
    rank = len(x.shape)
    opset = int(at.get("opset", 13))
    axis = int(at.get("axis", 1 if opset < 13 else -1)) % rank
    if opset < 13 and axis != rank - 1:
        raise ImportError_(f"node {name}: QLinearSoftmax of opset {opset} over the axes from "
                           f"{axis} on is not supported (over the last axis is)")
    f = dequantize(imp, name + "_x", x, _check_scale(imp, name, sx, "X_scale"), zx)
    p = imp.op("softmax", f, name=name + "_softmax", axis=axis)
    return _typed(imp, _quantize_probabilities(imp, name, p, sy, zy, dtype), dtype)


def _channels_first(imp, name, x, at):
    """An NHWC input (channels_last=1) as NCHW, and the permutation that undoes it."""
    rank = len(x.shape)
    if not at.get("channels_last", 0):
        return x, None
    to_first = (0, rank - 1) + tuple(range(1, rank - 1))
    back = tuple(int(i) for i in np.argsort(to_first))
    return imp.op("transpose", x, name=name + "_nchw", perm=to_first), back


def _window(at, size):
    """(kernel, strides, pads before, pads after) of a pooling window over `size`."""
    kernel = [int(k) for k in at["kernel_shape"]]
    strides = [int(s) for s in at.get("strides", [1] * len(size))]
    before, after = _pads(at, size, kernel, strides, [1] * len(size))
    return kernel, strides, list(before), list(after)


def _padded_to_the_last_window(size, at):
    """Pooling attributes with explicit pads that reach the end of every window (ceil_mode's
    last one may run past the padding): the same windows, without ceil_mode."""
    kernel, strides, before, after = _window(at, size)
    ceil = bool(at.get("ceil_mode", 0))
    ends = []
    for s, k, st, b, a in zip(size, kernel, strides, before, after):
        span = s + b + a - k
        o = (-(-span // st) if ceil else span // st) + 1
        if ceil and (o - 1) * st >= s + b:  # the last window must start inside
            o -= 1
        ends.append(max(a, (o - 1) * st + k - s - b))
    kept = {k: v for k, v in at.items() if k not in ("auto_pad", "ceil_mode")}
    return {**kept, "pads": before + ends}


def _average_pool(imp, name, x, at):
    """AveragePool of float x (NCHW, or NHWC where channels_last) as ONNX Runtime's
    QLinearAveragePool averages: count_include_pad divides every window by the kernel's size,
    also one that ceil_mode runs past the padding (ONNX's AveragePool divides that one by the
    part of it within the padding)."""
    x, back = _channels_first(imp, name, x, at)
    pool_at = {k: v for k, v in at.items() if k != "channels_last"}
    if pool_at.get("count_include_pad", 0):
        pool_at = _padded_to_the_last_window(x.shape[2:], pool_at)
    y = HANDLERS["AveragePool"](imp, name, [x], pool_at)
    return y if back is None else imp.op("transpose", y, name=name + "_nhwc", perm=back)


def _global_average(imp, name, x, params, dtype, channels_last):
    """sum(x - zx) over the image in int32, requantized by x_scale / (y_scale * pixels):
    ONNX Runtime's QLinearGlobalAveragePool (params: x_scale, x_zero_point, y_scale,
    y_zero_point)."""
    sx, zx, sy, zy = params
    rank = len(x.shape)
    axes = tuple(range(1, rank - 1)) if channels_last else tuple(range(2, rank))
    pixels = int(np.prod([x.shape[a] for a in axes]))
    acc = imp.op("sum", shift(imp, name + "_x", x, zx), name=name + "_sum", axis=axes,
                 keepdims=True)
    sx, sy = _scale(imp, name, sx, "x_scale"), _scale(imp, name, sy, "y_scale")
    if sx.size != 1 or sy.size != 1:
        raise ImportError_(f"node {name}: QLinearGlobalAveragePool needs one scale each")
    multiplier = sx.reshape(()) / (sy.reshape(()) * np.float32(pixels))
    return requantize(imp, name, acc, multiplier, zy, dtype, None)


def _average(imp, name, ins, at, dtype):
    """ONNX Runtime's QLinearAveragePool of ins (X, x_scale, x_zero_point, y_scale,
    y_zero_point; zero points optional): a window over the whole image without padding is
    its global average (an int32 sum, requantized); other windows average the dequantized
    values in float32 (see _average_pool) and quantize them with the zero point added before
    rounding."""
    x, sx, zx, sy, zy = (list(ins) + [None] * 5)[:5]
    last = bool(at.get("channels_last", 0))
    size = x.shape[1:-1] if last else x.shape[2:]
    kernel, _, before, after = _window(at, size)
    if list(size) == kernel and not any(before + after):
        return _global_average(imp, name, x, (sx, zx, sy, zy), dtype, last)
    if len(size) > 2:
        raise ImportError_(f"node {name}: average pooling over {len(size)}-D windows is not "
                           "supported (1-D and 2-D windows are, and global averages)")
    f = dequantize(imp, name + "_x", x, _check_scale(imp, name, sx, "x_scale"), zx)
    y = _average_pool(imp, name + "_average_pool", f, at)
    return quantize(imp, name, y, _check_scale(imp, name, sy, "y_scale"), zy, dtype,
                    zp_first=True)


@_on("com.microsoft.QLinearAveragePool")
def _qlinear_average_pool(imp, name, ins, at):
    dtype = _int_type(imp, name, 4, 0, 2)
    return _typed(imp, _average(imp, name, ins, at, dtype), dtype)


@_on("com.microsoft.QLinearGlobalAveragePool")
def _qlinear_global_average_pool(imp, name, ins, at):
    dtype = _int_type(imp, name, 4, 0, 2)
    return _typed(imp, _global_average(imp, name, ins[0], ins[1:5], dtype,
                                       bool(at.get("channels_last", 0))), dtype)


def as_qlinear_pool(imp, name, scale, zp, dtype):
    """The QuantizeLinear being translated (scale, zp: its own) of an AveragePool or
    GlobalAveragePool of a DequantizeLinear, as ONNX Runtime runs the three: fused into its
    QLinearAveragePool / QLinearGlobalAveragePool (see fused_by_onnx_runtime) where both
    quantizations are per tensor; None where it does not."""
    from onnx import helper
    pool = fused_by_onnx_runtime(imp, dtype, ("AveragePool", "GlobalAveragePool"))
    if pool is None:
        return None
    dq, _ = imp.uses(pool.input[0])
    x, sx, zx = ([imp.env[i] if i else None for i in dq.input] + [None])[:3]
    params = (sx, zx, scale, zp)
    if any(p is not None and (not p.is_const or p.data.size != 1) for p in params):
        return None
    if pool.op_type == "GlobalAveragePool":
        return _global_average(imp, name, x, params, dtype, False)
    at = {a.name: helper.get_attribute_value(a) for a in pool.attribute}
    at = {k: v.decode() if isinstance(v, bytes) else v for k, v in at.items()}
    return _average(imp, name, [x, *params], at, dtype)


def _binary_operands(imp, name, ins):
    """QLinearAdd's and QLinearMul's inputs (A, A_scale, A_zp, B, B_scale, B_zp, C_scale,
    C_zp; zero points optional): a, b, the three scales as float32 numbers, the three zero
    points as ints, and the output type."""
    a, sa, za, b, sb, zb, sc, zc = (_opt(ins, i) for i in range(8))
    dtype = _int_type(imp, name, 7, 0, 2)
    _int_type(imp, name, 3, 5)
    scales = []
    for v, what in ((sa, "A_scale"), (sb, "B_scale"), (sc, "C_scale")):
        s = _scale(imp, name, v, what)
        if s.size != 1:
            raise ImportError_(f"node {name}: {what} must be one value")
        scales.append(s.reshape(()))
    zps = [0 if z is None else int(imp.array(z, "a zero point", name).reshape(-1)[0])
           for z in (za, zb, zc)]
    return a, b, scales, zps, dtype


@_on("com.microsoft.QLinearAdd")
def _qlinear_add(imp, name, ins, at):
    a, b, scales, zps, dtype = _binary_operands(imp, name, ins)
    return _typed(imp, _qlinear_add_as_ort(imp, name, a, b, scales, zps, dtype), dtype)


@_on("com.microsoft.QLinearMul")
def _qlinear_mul(imp, name, ins, at):
    a, b, scales, zps, dtype = _binary_operands(imp, name, ins)
    return _typed(imp, _qlinear_mul_as_ort(imp, name, a, b, scales, zps, dtype), dtype)


@_on("com.microsoft.QLinearConcat")
def _qlinear_concat(imp, name, ins, at):
    """Each input requantized to the output's scale and zero point (as it is where they
    differ: quantize(dequantize(x))), then concatenated."""
    sy, zy = ins[0], ins[1]
    dtype = _int_type(imp, name, 1, 2, 4)
    sy = _scale(imp, name, sy, "Y_scale")
    zy_data = imp.array(zy, "Y_zero_point", name) if zy is not None else np.zeros(1)
    parts = []
    for j in range(2, len(ins), 3):
        x, sx, zx = ins[j], ins[j + 1], ins[j + 2]
        sxd = _scale(imp, name, sx, f"the scale of input {j // 3}")
        zxd = imp.array(zx, "a zero point", name) if zx is not None else np.zeros(1)
        if not (np.array_equal(sxd.reshape(-1), sy.reshape(-1))
                and np.array_equal(zxd.reshape(-1), zy_data.reshape(-1))):
            x = quantize(imp, f"{name}_{j // 3}", dequantize(imp, f"{name}_{j // 3}_x", x, sx,
                                                             zx), ins[0], zy, dtype)
        parts.append(x)
    return _typed(imp, HANDLERS["Concat"](imp, name, parts, at), dtype)
