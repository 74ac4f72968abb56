"""The translations of ONNX operators (opsets 13 to 21) into graph operators, one handler
each: `handler(imp, name, inputs, attrs) -> Value or list of Values`, where `imp` is the
importer of onnx.py (imp.op emits a node, or folds it when its inputs are constants; imp.node
is the ONNX node; imp.opset its opset). A handler refuses what it cannot translate with an
ImportError_ that says why; the importer collects the refusals into one error."""
from __future__ import annotations

import math

import numpy as np

from .common import ImportError_

HANDLERS: dict = {}


class InvalidModel(ImportError_):
    """The model itself is wrong (ONNX Runtime refuses it too), not merely unsupported."""


def _on(*ops):
    def deco(fn):
        for o in ops:
            HANDLERS[o] = fn
        return fn
    return deco


def _opt(ins, i):
    return ins[i] if len(ins) > i else None


# ------------------------------------------------------------------ elementwise
def _unary(op, **fixed):
    return lambda imp, name, ins, at: imp.op(op, ins[0], name=name, **fixed)


for _k, _op in {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp",
                "Sqrt": "sqrt", "Neg": "neg", "Erf": "erf", "Abs": "abs", "Log": "log",
                "Floor": "floor", "Ceil": "ceil", "Sin": "sin", "Cos": "cos",
                "Softplus": "softplus", "Sign": "sign", "Round": "round", "Mish": "mish",
                "HardSwish": "hardswish", "IsNaN": "isnan", "Not": "logical_not",
                "Reciprocal": "reciprocal"}.items():
    HANDLERS[_k] = _unary(_op)


@_on("Gelu")
def _gelu(imp, name, ins, at):
    return imp.op("gelu", ins[0], name=name, approximate=at.get("approximate", "none"))


@_on("HardSigmoid")
def _hard_sigmoid(imp, name, ins, at):
    return imp.op("hardsigmoid", ins[0], name=name, alpha=float(at.get("alpha", 0.2)),
                  beta=float(at.get("beta", 0.5)))


@_on("LeakyRelu")
def _leaky_relu(imp, name, ins, at):
    return imp.op("leaky_relu", ins[0], name=name, alpha=float(at.get("alpha", 0.01)))


@_on("Elu")
def _elu(imp, name, ins, at):
    return imp.op("elu", ins[0], name=name, alpha=float(at.get("alpha", 1.0)))


@_on("Selu")
def _selu(imp, name, ins, at):
    alpha, gamma = float(at.get("alpha", 1.67326319217681884765625)), \
        float(at.get("gamma", 1.05070102214813232421875))
    return imp.op("mul", imp.op("elu", ins[0], name=name + "_elu", alpha=alpha), name=name,
                  scalar=gamma)


@_on("Celu")
def _celu(imp, name, ins, at):
    """alpha * elu(x / alpha)."""
    alpha = float(at.get("alpha", 1.0))
    y = imp.op("elu", imp.op("mul", ins[0], name=name + "_in", scalar=1 / alpha),
               name=name + "_elu", alpha=1.0)
    return imp.op("mul", y, name=name, scalar=alpha)


@_on("Softsign")
def _softsign(imp, name, ins, at):
    x = ins[0]
    d = imp.op("add", imp.op("abs", x, name=name + "_abs"), name=name + "_d", scalar=1.0)
    return imp.op("div", x, d, name=name)


@_on("PRelu")
def _prelu(imp, name, ins, at):
    x, slope = ins
    neg = imp.op("less", x, name=name + "_neg", scalar=0.0)
    return imp.op("where", neg, imp.op("mul", x, slope, name=name + "_scaled"), x, name=name)


@_on("ThresholdedRelu")
def _thresholded_relu(imp, name, ins, at):
    x = ins[0]
    keep = imp.op("greater", x, name=name + "_keep", scalar=float(at.get("alpha", 1.0)))
    return imp.op("where", keep, x, imp.const(name + "_zero", np.zeros(1, np.float32)),
                  name=name)


def _scalar(v):
    """The number a one-element constant holds, else None."""
    if v is not None and v.is_const and v.data.size == 1:
        x = v.data.reshape(-1)[0]
        return bool(x) if v.data.dtype == np.bool_ else x.item()
    return None


@_on("Clip")
def _clip(imp, name, ins, at):
    x, lo, hi = ins[0], _opt(ins, 1), _opt(ins, 2)
    bounds = {}
    for key, v in (("min", lo), ("max", hi)):
        if v is not None and (_scalar(v) is None or x.dtype != "float32"):
            # a tensor bound, or an integer one: an elementwise max / min
            x = imp.op("maximum" if key == "min" else "minimum", x, v, name=f"{name}_{key}")
        elif v is not None:
            bounds[key] = float(_scalar(v))
    if not bounds:
        return x
    return imp.op("clip", x, name=name, min=bounds.get("min"), max=bounds.get("max"))


def _binary(op):
    def h(imp, name, ins, at):
        a, b = ins
        for x, y, rev in ((a, b, False), (b, a, True)):  # a scalar constant becomes scalar=
            s = _scalar(y)
            if s is not None and not x.is_const and len(y.shape) <= len(x.shape) \
                    and x.dtype == "float32":  # scalar= is a float
                if op == "pow" and s == 2:
                    return imp.op("mul", x, x, name=name)
                if op == "pow" and s == 0.5:
                    return imp.op("sqrt", x, name=name)
                return imp.op(op, x, name=name, scalar=float(s), reverse=rev)
        return imp.op(op, a, b, name=name)
    return h


for _k, _op in {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow",
                "Equal": "equal", "Less": "less", "LessOrEqual": "less_equal",
                "Greater": "greater", "GreaterOrEqual": "greater_equal",
                "And": "logical_and", "Or": "logical_or"}.items():
    HANDLERS[_k] = _binary(_op)


def _variadic(op):
    def h(imp, name, ins, at):
        y = ins[0]
        for i, v in enumerate(ins[1:]):
            y = _binary(op)(imp, name if i == len(ins) - 2 else f"{name}_{i}", [y, v], at)
        return y
    return h


@_on("Mean")
def _mean(imp, name, ins, at):
    total = _variadic("add")(imp, name + "_sum", ins, at)
    return total if len(ins) == 1 else imp.op("mul", total, name=name, scalar=1 / len(ins))


HANDLERS["Max"] = _variadic("maximum")
HANDLERS["Min"] = _variadic("minimum")
HANDLERS["Sum"] = _variadic("add")


@_on("Mod")
def _mod(imp, name, ins, at):
    a, b = ins
    if bool(at.get("fmod", 0)) != (a.dtype == "float32"):  # graph mod: fmod on floats only
        raise ImportError_(f"node {name}: Mod with fmod={at.get('fmod', 0)} on {a.dtype} is "
                           "not supported")
    return imp.op("mod", a, b, name=name)


@_on("Where")
def _where(imp, name, ins, at):
    return imp.op("where", *ins, name=name)


@_on("Identity")
def _identity(imp, name, ins, at):
    return ins[0]


@_on("Dropout")
def _dropout(imp, name, ins, at):
    """Inference: the input, and a mask that keeps everything."""
    return [ins[0], imp.const(name + "_mask", np.ones(ins[0].shape, np.bool_))]


_CAST_NUMPY = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64,
               9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}


def _cast_to(imp, name, x, to: int):
    if to not in _CAST_NUMPY:
        raise ImportError_(f"node {name}: Cast to element type {to} is not supported")
    if x.is_const:
        return imp.const(name, x.data.astype(_CAST_NUMPY[to]))
    if to == 9:  # bool: nonzero is true
        return imp.op("not_equal", x, name=name, scalar=0.0)
    dtype = "float32" if np.dtype(_CAST_NUMPY[to]).kind == "f" else "int32"
    return x if x.dtype == dtype else imp.op("cast", x, name=name, dtype=dtype)


@_on("Cast")
def _cast(imp, name, ins, at):
    return _cast_to(imp, name, ins[0], int(at["to"]))


@_on("CastLike")
def _cast_like(imp, name, ins, at):
    from onnx import helper
    like = ins[1]
    if like.is_const:
        return _cast_to(imp, name, ins[0], helper.np_dtype_to_tensor_dtype(like.data.dtype))
    return _cast_to(imp, name, ins[0], 1 if like.dtype == "float32" else 6)


# ------------------------------------------------------------------ constants and shapes
@_on("Constant")
def _constant(imp, name, ins, at):
    from onnx import numpy_helper
    if "value" in at:
        return imp.const(name, numpy_helper.to_array(at["value"]))
    for k, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                     ("value_int", np.int64), ("value_ints", np.int64)):
        if k in at:
            return imp.const(name, np.asarray(at[k], dtype))
    raise ImportError_(f"node {name}: Constant without a tensor, float or int value")


@_on("Shape")
def _shape(imp, name, ins, at):
    shape = np.asarray(ins[0].shape, np.int64)
    return imp.const(name, shape[slice(at.get("start", 0), at.get("end"))])


@_on("Size")
def _size(imp, name, ins, at):
    return imp.const(name, np.asarray(int(np.prod(ins[0].shape)), np.int64))


@_on("ConstantOfShape")
def _constant_of_shape(imp, name, ins, at):
    from onnx import numpy_helper
    value = numpy_helper.to_array(at["value"]).reshape(-1) if "value" in at else \
        np.zeros(1, np.float32)
    return imp.const(name, np.full(imp.ints(ins[0], "the shape", name), value[0], value.dtype))


@_on("Range")
def _range(imp, name, ins, at):
    start, limit, delta = (imp.array(v, "Range's " + w, name)
                           for v, w in zip(ins, ("start", "limit", "delta")))
    return imp.const(name, np.arange(start, limit, delta).astype(start.dtype))


# ------------------------------------------------------------------ linear algebra, convolution
@_on("MatMul")
def _matmul(imp, name, ins, at):
    a, b = ins
    if len(b.shape) >= 3 and len(a.shape) >= 2 and a.shape[:-2] != b.shape[:-2]:
        lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])  # broadcast batch dimensions
        a = _expand_to(imp, name + "_a", a, lead + a.shape[-2:])
        b = _expand_to(imp, name + "_b", b, lead + b.shape[-2:])
    return imp.e.matmul(a, b, name, emit=imp.op)  # imp.op folds constant operands


def _expand_to(imp, name, x, shape):
    shape = tuple(shape)
    if x.shape == shape:
        return x
    return imp.op("expand", x, name=name, shape=shape)


@_on("Gemm")
def _gemm(imp, name, ins, at):
    a, b, c = ins[0], ins[1], _opt(ins, 2)
    if at.get("transA", 0):
        a = imp.op("transpose", a, name=name + "_ta", perm=(1, 0))
    y = imp.op("matmul", a, b, name=name, transpose_b=bool(at.get("transB", 0)))
    alpha, beta = at.get("alpha", 1.0), at.get("beta", 1.0)
    if alpha != 1.0:
        y = imp.op("mul", y, name=name + "_alpha", scalar=float(alpha))
    if c is not None:
        if beta != 1.0:
            c = imp.op("mul", c, name=name + "_beta", scalar=float(beta))
        y = imp.op("add", y, c, name=name + "_bias")
    return y


def _pads(at, size, kernel, strides, dil):
    """(before, after) per spatial axis, from pads or auto_pad."""
    n = len(size)
    auto = at.get("auto_pad", "NOTSET")
    if auto == "VALID":
        return [0] * n, [0] * n
    if auto == "NOTSET":
        pads = list(at.get("pads", [0] * 2 * n))
        return pads[:n], pads[n:]
    before, after = [], []
    for s, k, st, d in zip(size, kernel, strides, dil):
        out = -(-s // st)
        total = max(0, (out - 1) * st + (k - 1) * d + 1 - s)
        small, big = total // 2, total - total // 2
        before.append(small if auto == "SAME_UPPER" else big)
        after.append(big if auto == "SAME_UPPER" else small)
    return before, after


def _as_2d(imp, name, x, nd):
    """A 1-D (N, C, L) operand as (N, C, 1, L), so that 2-D operators compute it."""
    if nd == 2:
        return x
    if nd != 1:
        raise ImportError_(f"node {name}: {nd}-D windows are not supported (1-D and 2-D are)")
    return imp.e.reshape(x, x.shape[:2] + (1,) + x.shape[2:], name + "_2d")


def _from_2d(imp, name, y, nd):
    return y if nd == 2 else imp.e.reshape(y, y.shape[:2] + y.shape[3:], name + "_1d")


@_on("Conv")
def _conv(imp, name, ins, at):
    x, w, b = ins[0], ins[1], _opt(ins, 2)
    nd = len(w.shape) - 2
    ones = [1] * nd
    strides, dil = list(at.get("strides", ones)), list(at.get("dilations", ones))
    before, after = _pads(at, x.shape[2:], w.shape[2:], strides, dil)
    x, w = _as_2d(imp, name + "_x", x, nd), _as_2d(imp, name + "_w", w, nd)
    if nd == 1:
        strides, dil, before, after = [1] + strides, [1] + dil, [0] + before, [0] + after
    if before != after:
        x = imp.op("pad", x, name=name + "_pad", pad_before=(0, 0) + tuple(before),
                   pad_after=(0, 0) + tuple(after), value=0.0)
        before = [0, 0]
    y = imp.op("conv2d", x, w, name=name, stride=tuple(strides), padding=tuple(before),
               dilation=tuple(dil), groups=int(at.get("group", 1)))
    if b is not None:
        y = imp.op("add", y, imp.e.reshape(b, (1, b.shape[0], 1, 1)), name=name + "_bias")
    return _from_2d(imp, name, y, nd)


@_on("ConvTranspose")
def _conv_transpose(imp, name, ins, at):
    """A convolution of the input spread out by the stride (stride - 1 zeros after each
    element), padded by the kernel's extent less the pads, with the kernel flipped and its
    channel axes swapped: out = (in - 1) * stride + extent - pads + output_padding."""
    x, w, b = ins[0], ins[1], _opt(ins, 2)
    nd = len(w.shape) - 2
    if not w.is_const:
        raise ImportError_(f"node {name}: ConvTranspose needs constant weights")
    if "output_shape" in at or at.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise ImportError_(f"node {name}: ConvTranspose with output_shape or auto_pad SAME is "
                           "not supported (pads are)")
    zeros = [0] * nd
    strides = list(at.get("strides", [1] * nd))
    dil = list(at.get("dilations", [1] * nd))
    pads = list(at.get("pads", zeros * 2)) if at.get("auto_pad", "NOTSET") == "NOTSET" \
        else zeros * 2
    extra = list(at.get("output_padding", zeros))
    g = int(at.get("group", 1))
    c, kg, ks = w.shape[0], w.shape[1], w.shape[2:]
    wd = w.data.reshape((g, c // g, kg) + ks).swapaxes(1, 2).reshape((g * kg, c // g) + ks)
    wd = np.ascontiguousarray(np.flip(wd, axis=tuple(range(2, 2 + nd))))
    x = _as_2d(imp, name + "_x", x, nd)
    if nd == 1:
        wd, ks = wd.reshape(wd.shape[:2] + (1,) + ks), (1,) + ks
        strides, dil, extra = [1] + strides, [1] + dil, [0] + extra
        pads = [0, pads[0], 0, pads[1]]
    n, _, h, wid = x.shape
    if strides != [1, 1]:  # spread: (N, C, H, 1, W, 1) padded to (N, C, H, sh, W, sw)
        y = imp.e.reshape(x, (n, x.shape[1], h, 1, wid, 1), name + "_cells")
        y = imp.op("pad", y, name=name + "_spread", pad_before=(0,) * 6,
                   pad_after=(0, 0, 0, strides[0] - 1, 0, strides[1] - 1), value=0.0)
        x = imp.e.reshape(y, (n, x.shape[1], h * strides[0], wid * strides[1]), name + "_up")
    before = [(k - 1) * d - p for k, d, p in zip(ks, dil, pads[:2])]
    after = [(k - 1) * d - p + e - (s - 1)
             for k, d, p, e, s in zip(ks, dil, pads[2:], extra, strides)]
    for axis, (lo, hi) in enumerate(zip(before, after)):
        if lo < 0 or hi < 0:  # pads beyond the kernel's extent crop
            size = x.shape[2 + axis]
            x = _slice_axis(imp, f"{name}_crop{axis}", x, 2 + axis, max(0, -lo),
                            size - max(0, -hi), 1)
    before, after = [max(0, p) for p in before], [max(0, p) for p in after]
    if before != after:
        x = imp.op("pad", x, name=name + "_pad", pad_before=(0, 0) + tuple(before),
                   pad_after=(0, 0) + tuple(after), value=0.0)
        before = [0, 0]
    y = imp.op("conv2d", x, imp.const(name + "_w", wd), name=name, padding=tuple(before),
               dilation=tuple(dil), groups=g)
    if b is not None:
        y = imp.op("add", y, imp.e.reshape(b, (1, b.shape[0], 1, 1)), name=name + "_bias")
    return _from_2d(imp, name, y, nd)


@_on("BatchNormalization")
def _bn(imp, name, ins, at):
    x, scale, bias, mean, var = ins[:5]
    if not all(v.is_const for v in (scale, bias, mean, var)):
        raise ImportError_(f"node {name}: BatchNormalization needs constant statistics")
    s = scale.data / np.sqrt(var.data.astype(np.float64) + at.get("epsilon", 1e-5))
    shift = bias.data - mean.data * s
    src = x.producer.inputs[0] if x.producer is not None and x.producer.op == "reshape" else None
    if src is not None and len(x.shape) == 3 and src.shape == x.shape[:2] + (1,) + x.shape[2:]:
        # after a 1-D convolution: on its 2-D output, where the scale folds into the weights
        y = imp.e.channel_affine(src, s, shift, name)
        return imp.e.reshape(y, x.shape, name + "_1d")
    return imp.e.channel_affine(x, s, shift, name)


# ------------------------------------------------------------------ pooling
def _pool(kind):
    def h(imp, name, ins, at):
        x = ins[0]
        nd = len(x.shape) - 2
        if len(imp.node.output) > 1 and imp.node.output[1]:
            raise ImportError_(f"node {name}: MaxPool's Indices output is not supported")
        kernel = list(at["kernel_shape"])
        strides = list(at.get("strides", [1] * nd))
        if any(d != 1 for d in at.get("dilations", [1] * nd)):
            raise ImportError_(f"node {name}: pooling with dilations is not supported")
        before, after = _pads(at, x.shape[2:], kernel, strides, [1] * nd)
        x = _as_2d(imp, name + "_x", x, nd)
        if nd == 1:
            kernel, strides, before, after = [1] + kernel, [1] + strides, [0] + before, \
                [0] + after
        y = _pool2d(imp, name, kind, x, kernel, strides, before, after,
                    bool(at.get("ceil_mode", 0)), bool(at.get("count_include_pad", 0)))
        return _from_2d(imp, name, y, nd)
    return h


def _pool2d(imp, name, kind, x, kernel, strides, before, after, ceil_mode, include_pad):
    """max_pool2d / avg_pool2d with ONNX's padding, ceil_mode and count_include_pad. Even
    padding of at most half the kernel is the operator's own (its ceil_mode and
    count_include_pad are PyTorch's rules, which ONNX follows); other padding is a pad node
    (zeros, or the lowest float for max) with the average's divisor a constant per output
    position."""
    if before == after and all(p <= k // 2 for p, k in zip(before, kernel)):
        opts = {"ceil_mode": True} if ceil_mode else {}
        if kind == "avg_pool2d" and (ceil_mode or any(before)):
            opts["count_include_pad"] = include_pad
        return imp.op(kind, x, name=name, kernel=tuple(kernel), stride=tuple(strides),
                      padding=tuple(before), **opts)
    size = x.shape[2:]
    out, extra = [], []
    for s, k, st, b, a in zip(size, kernel, strides, before, after):
        span = s + b + a - k
        o = (-(-span // st) if ceil_mode else span // st) + 1
        if ceil_mode and (o - 1) * st >= s + b:  # the last window must start inside
            o -= 1
        out.append(o)
        extra.append(max(0, (o - 1) * st + k - (s + b + a)))
    low = float(np.finfo(np.float32).min) if kind == "max_pool2d" else 0.0
    x = imp.op("pad", x, name=name + "_pad", pad_before=(0, 0) + tuple(before),
               pad_after=(0, 0) + tuple(a + e for a, e in zip(after, extra)), value=low)
    y = imp.op(kind, x, name=name, kernel=tuple(kernel), stride=tuple(strides))
    if kind == "avg_pool2d":
        per_axis = []
        for s, k, st, b, a, o in zip(size, kernel, strides, before, after, out):
            lo_edge, hi_edge = (-b, s + a) if include_pad else (0, s)
            starts = np.arange(o) * st - b
            per_axis.append(np.minimum(starts + k, hi_edge) - np.maximum(starts, lo_edge))
        counts = np.outer(*per_axis)
        if not np.all(counts == np.prod(kernel)):
            scale = (np.prod(kernel) / counts).astype(np.float32).reshape((1, 1) + tuple(out))
            y = imp.op("mul", y, imp.const(name + "_count", scale), name=name + "_scaled")
    return y


HANDLERS["MaxPool"] = _pool("max_pool2d")
HANDLERS["AveragePool"] = _pool("avg_pool2d")


@_on("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(imp, name, ins, at):
    x = ins[0]
    op = "mean" if imp.node.op_type == "GlobalAveragePool" else "max"
    return imp.op(op, x, name=name, axis=tuple(range(2, len(x.shape))), keepdims=True)


# ------------------------------------------------------------------ shapes and data movement
@_on("Flatten")
def _flatten(imp, name, ins, at):
    x = ins[0]
    axis = at.get("axis", 1) % max(len(x.shape), 1) if at.get("axis", 1) else 0
    return imp.e.reshape(x, (int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))), name)


@_on("Reshape")
def _reshape(imp, name, ins, at):
    x = ins[0]
    shape = imp.ints(ins[1], "the shape", name)
    shape = [x.shape[i] if s == 0 and not at.get("allowzero", 0) else s
             for i, s in enumerate(shape)]
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1]))
        shape[shape.index(-1)] = int(np.prod(x.shape)) // known
    return imp.e.reshape(x, shape, name)


def _axes_of(imp, name, ins, at, pos=1):
    if "axes" in at:
        return list(at["axes"])
    v = _opt(ins, pos)
    return imp.ints(v, "axes", name) if v is not None else None


@_on("Unsqueeze")
def _unsqueeze(imp, name, ins, at):
    x = ins[0]
    axes = _axes_of(imp, name, ins, at)
    rank = len(x.shape) + len(axes)
    shape = list(x.shape)
    for a in sorted(a % rank for a in axes):
        shape.insert(a, 1)
    return imp.e.reshape(x, shape, name)


@_on("Squeeze")
def _squeeze(imp, name, ins, at):
    x = ins[0]
    axes = _axes_of(imp, name, ins, at)
    axes = {a % len(x.shape) for a in axes} if axes else {i for i, s in enumerate(x.shape)
                                                          if s == 1}
    return imp.e.reshape(x, [s for i, s in enumerate(x.shape) if i not in axes], name)


@_on("Transpose")
def _transpose(imp, name, ins, at):
    perm = at.get("perm", list(reversed(range(len(ins[0].shape)))))
    return imp.op("transpose", ins[0], name=name, perm=tuple(perm))


@_on("Concat")
def _concat(imp, name, ins, at):
    ins = [v for v in ins if v is not None and 0 not in v.shape]  # empty parts add nothing
    if len(ins) == 1:
        return ins[0]
    return imp.op("concat", *ins, name=name, axis=int(at["axis"]) % len(ins[0].shape))


def _slice_axis(imp, name, x, axis, start, stop, step):
    """x[start:stop:step] on one axis, with Python's clamping (ONNX's too)."""
    size = x.shape[axis]
    start, stop, step = slice(start, stop, step).indices(size)
    if (start, stop, step) == (0, size, 1):
        return x
    if step < 0 and stop < 0:
        stop = None  # "before index 0", which -1 would not say
    return imp.op("slice", x, name=name, axis=axis, start=start, stop=stop, step=step)


@_on("Slice")
def _slice(imp, name, ins, at):
    x = ins[0]
    starts, ends = imp.ints(ins[1], "starts", name), imp.ints(ins[2], "ends", name)
    axes = imp.ints(_opt(ins, 3), "axes", name) or list(range(len(starts)))
    steps = imp.ints(_opt(ins, 4), "steps", name) or [1] * len(starts)
    for s, e, a, st in zip(starts, ends, axes, steps):
        x = _slice_axis(imp, name, x, a % len(x.shape), s, e, st)
    return x


@_on("Split")
def _split(imp, name, ins, at):
    x = ins[0]
    axis = int(at.get("axis", 0)) % len(x.shape)
    size, n = x.shape[axis], len(imp.node.output)
    sizes = imp.ints(_opt(ins, 1), "the split sizes", name) or at.get("split")
    if not sizes:
        n = int(at.get("num_outputs", n))
        chunk = -(-size // n) if "num_outputs" in at else size // n
        sizes = [min(chunk, size - i * chunk) for i in range(n)]
    if sum(sizes) != size:
        raise InvalidModel(f"node {name}: Split sizes {list(sizes)} do not add up to axis "
                           f"{axis}'s size {size}")
    outs, start = [], 0
    for i, s in enumerate(sizes):
        outs.append(_slice_axis(imp, f"{name}_{i}", x, axis, start, start + s, 1))
        start += s
    return outs


def _const_indices(imp, name, idx, n, axis, op):
    """Constant indices with negative ones wrapped; out-of-range ones refused as ONNX Runtime
    refuses them."""
    i = np.asarray(idx.data).astype(np.int64)
    bad = i[(i < -n) | (i >= n)]
    if bad.size:
        raise InvalidModel(f"node {name}: {op} index {int(bad.reshape(-1)[0])} is out of range "
                           f"for axis {axis} of size {n} (ONNX Runtime refuses it too); fix the "
                           "model's indices")
    return np.where(i < 0, i + n, i)


@_on("Gather")
def _gather(imp, name, ins, at):
    data, idx = ins
    axis = at.get("axis", 0) % len(data.shape)
    n = data.shape[axis]
    if not idx.is_const:
        if axis == 0 and data.is_const:
            return imp.op("embedding", data, idx, name=name)
        return imp.op("gather", data, idx, name=name, axis=axis)
    i = _const_indices(imp, name, idx, n, axis, "Gather")
    if data.is_const:
        return imp.const(name, np.take(data.data, i, axis=axis))
    flat = i.reshape(-1)
    step = int(flat[1] - flat[0]) if flat.size > 1 else 1
    if flat.size and step >= 1 and np.array_equal(flat, flat[0] + step * np.arange(flat.size)):
        # a strided range of indices is a slice
        y = _slice_axis(imp, name, data, axis, int(flat[0]), int(flat[-1]) + 1, step)
        return imp.e.reshape(y, data.shape[:axis] + i.shape + data.shape[axis + 1:], name)
    return imp.op("gather", data, imp.const(name + "_idx", i.astype(np.int32)), name=name,
                  axis=axis)


@_on("GatherElements")
def _gather_elements(imp, name, ins, at):
    data, idx = ins
    axis = at.get("axis", 0) % len(data.shape)
    if idx.is_const:
        i = _const_indices(imp, name, idx, data.shape[axis], axis, "GatherElements")
        if data.is_const:
            return imp.const(name, np.take_along_axis(data.data, i, axis=axis))
        idx = imp.const(name + "_idx", i.astype(np.int32))
    return imp.op("gather_elements", data, idx, name=name, axis=axis)


@_on("Expand")
def _expand(imp, name, ins, at):
    x = ins[0]
    shape = tuple(np.broadcast_shapes(x.shape, tuple(imp.ints(ins[1], "the shape", name))))
    if x.is_const:
        return imp.const(name, np.ascontiguousarray(np.broadcast_to(x.data, shape)))
    return _expand_to(imp, name, x, shape)


@_on("Tile")
def _tile(imp, name, ins, at):
    reps = tuple(imp.ints(ins[1], "the repeats", name))
    if all(r == 1 for r in reps):
        return ins[0]
    return imp.op("tile", ins[0], name=name, reps=reps)


@_on("DepthToSpace", "SpaceToDepth")
def _depth_space(imp, name, ins, at):
    """Blocks of channels to pixels and back: a reshape, a 6-D transpose, a reshape."""
    x = ins[0]
    b = int(at["blocksize"])
    n, c, h, w = x.shape
    if imp.node.op_type == "SpaceToDepth":
        y = imp.e.reshape(x, (n, c, h // b, b, w // b, b), name + "_blocks")
        y = imp.op("transpose", y, name=name + "_t", perm=(0, 3, 5, 1, 2, 4))
        return imp.e.reshape(y, (n, c * b * b, h // b, w // b), name)
    crd = at.get("mode", "DCR") == "CRD"
    y = imp.e.reshape(x, (n, c // (b * b), b, b, h, w) if crd else (n, b, b, c // (b * b), h, w),
                      name + "_blocks")
    y = imp.op("transpose", y, name=name + "_t",
               perm=(0, 1, 4, 2, 5, 3) if crd else (0, 3, 4, 1, 5, 2))
    return imp.e.reshape(y, (n, c // (b * b), h * b, w * b), name)


@_on("CumSum")
def _cumsum(imp, name, ins, at):
    """A product with a triangular matrix of ones: y = x @ T over the summed axis."""
    x = ins[0]
    rank = len(x.shape)
    axis = imp.ints(ins[1], "the axis", name)[0] % rank
    k = np.arange(x.shape[axis])
    before = k[:, None] > k[None, :] if at.get("reverse", 0) else k[:, None] < k[None, :]
    tri = before | ((k[:, None] == k[None, :]) & (not at.get("exclusive", 0)))
    perm = [a for a in range(rank) if a != axis] + [axis]
    xt = x if axis == rank - 1 else imp.op("transpose", x, name=name + "_t", perm=tuple(perm))
    xf = xt if xt.dtype == "float32" else imp.op("cast", xt, name=name + "_f", dtype="float32")
    y = imp.e.matmul(xf, imp.const(name + "_tri", tri.astype(np.float32)), name, emit=imp.op)
    if x.dtype != "float32":
        y = imp.op("cast", y, name=name + "_i", dtype=x.dtype)
    if axis != rank - 1:
        y = imp.op("transpose", y, name=name + "_back", perm=tuple(np.argsort(perm)))
    return y


@_on("Trilu")
def _trilu(imp, name, ins, at):
    x = ins[0]
    k = imp.ints(_opt(ins, 1), "k", name)
    k = k[0] if k else 0
    rows, cols = x.shape[-2:]
    keep = np.tril(np.ones((rows, cols), bool), k) if not at.get("upper", 1) else \
        np.triu(np.ones((rows, cols), bool), k)
    return imp.op("where", imp.const(name + "_mask", keep), x,
                  imp.const(name + "_zero", np.zeros((), np.float32 if x.dtype == "float32"
                                                     else np.int32)), name=name)


@_on("Pad")
def _pad(imp, name, ins, at):
    x = ins[0]
    mode = at.get("mode", "constant")
    if mode != "constant":
        raise ImportError_(f"node {name}: Pad mode {mode!r} is not supported (constant is)")
    pads = imp.ints(ins[1], "the pads", name)
    value = _opt(ins, 2)
    value = 0.0 if value is None else float(imp.array(value, "the pad value", name)
                                            .reshape(-1)[0])
    rank = len(x.shape)
    axes = [a % rank for a in imp.ints(_opt(ins, 3), "the axes", name) or range(rank)]
    before, after = [0] * rank, [0] * rank
    for j, a in enumerate(axes):
        before[a], after[a] = pads[j], pads[len(axes) + j]
    if any(p < 0 for p in before + after):
        for a in range(rank):  # negative pads crop
            if before[a] < 0 or after[a] < 0:
                x = _slice_axis(imp, name + "_crop", x, a, max(0, -before[a]),
                                x.shape[a] - max(0, -after[a]), 1)
        before, after = [max(0, p) for p in before], [max(0, p) for p in after]
    if not any(before + after):
        return x
    return imp.op("pad", x, name=name, pad_before=tuple(before), pad_after=tuple(after),
                  value=value)


@_on("Resize")
def _resize(imp, name, ins, at):
    x = ins[0]
    rank = len(x.shape)
    mode = at.get("mode", "nearest")
    if mode not in ("nearest", "linear"):
        raise ImportError_(f"node {name}: Resize mode {mode!r} is not supported (nearest and "
                           "linear are)")
    if at.get("antialias", 0) or at.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise ImportError_(f"node {name}: Resize with antialias or a keep_aspect_ratio_policy "
                           "is not supported")
    axes = [a % rank for a in at.get("axes", range(rank))]
    sizes = imp.ints(_opt(ins, 3), "the sizes", name)
    scales_v = _opt(ins, 2)
    scales = list(imp.array(scales_v, "the scales", name).reshape(-1)) \
        if scales_v is not None and scales_v.shape != (0,) else None
    out, full_scales = list(x.shape), [1.0] * rank
    for j, a in enumerate(axes):
        if sizes:
            out[a] = sizes[j]
        else:  # the coordinates follow the given scale, not out / in
            out[a], full_scales[a] = int(math.floor(x.shape[a] * scales[j])), float(scales[j])
    extra = {"scales": tuple(full_scales)} if not sizes else {}
    return imp.op("resize", x, name=name, mode=mode, sizes=tuple(out),
                  coordinate_transformation_mode=at.get("coordinate_transformation_mode",
                                                        "half_pixel"),
                  nearest_mode=at.get("nearest_mode", "round_prefer_floor"), **extra)


# ------------------------------------------------------------------ reductions, normalization
@_on("Softmax", "LogSoftmax")
def _softmax(imp, name, ins, at):
    op = "softmax" if imp.node.op_type == "Softmax" else "log_softmax"
    return imp.op(op, ins[0], name=name, axis=int(at.get("axis", -1)) % len(ins[0].shape))


@_on("LayerNormalization")
def _layer_norm(imp, name, ins, at):
    x, gamma, beta = ins[0], _opt(ins, 1), _opt(ins, 2)
    if any(o for o in imp.node.output[1:]):
        raise ImportError_(f"node {name}: LayerNormalization's Mean and InvStdDev outputs are "
                           "not supported")
    axis = at.get("axis", -1) % len(x.shape)
    eps = float(at.get("epsilon", 1e-5))
    inner = int(np.prod(x.shape[axis:]))
    flat = imp.e.reshape(x, x.shape[:axis] + (inner,), name + "_flat")
    args = [flat] + [_param(imp, name, v, x.shape[axis:], inner) for v in (gamma, beta)
                     if v is not None]
    if gamma is None and beta is not None:
        raise ImportError_(f"node {name}: LayerNormalization with a bias but no scale")
    return imp.e.reshape(imp.op("layer_norm", *args, name=name, eps=eps), x.shape, name + "_out")


def _param(imp, name, v, norm_shape, inner):
    """A normalization's scale or bias as a vector over the flattened normalized axes."""
    if tuple(v.shape) != tuple(norm_shape):
        v = _expand_to(imp, name + "_param", v, norm_shape)
    return imp.e.reshape(v, (inner,), name + "_param")


@_on("InstanceNormalization", "GroupNormalization")
def _group_norm(imp, name, ins, at):
    """Normalized over each (sample, group of channels): a layer_norm of (N, G, C/G * spatial)
    rows, then the per-channel scale and bias (InstanceNormalization: one channel a group)."""
    x, scale, bias = ins[:3]
    n, c = x.shape[:2]
    groups = int(at.get("num_groups", c))
    y = imp.e.reshape(x, (n, groups, int(np.prod(x.shape[1:])) // groups), name + "_rows")
    y = imp.e.reshape(imp.op("layer_norm", y, name=name + "_norm",
                             eps=float(at.get("epsilon", 1e-5))), x.shape, name + "_back")
    if scale.shape[0] != c:  # GroupNormalization before opset 21: one scale per group
        scale, bias = (imp.const(v.name + "_c", np.repeat(imp.array(v, "the scale", name),
                                                          c // groups)) for v in (scale, bias))
    if scale.is_const and bias.is_const:
        return imp.e.channel_affine(y, scale.data, bias.data, name)
    per_channel = (1, c) + (1,) * (len(x.shape) - 2)
    y = imp.op("mul", y, imp.e.reshape(scale, per_channel), name=name + "_mul")
    return imp.op("add", y, imp.e.reshape(bias, per_channel), name=name)


@_on("SimplifiedLayerNormalization", "RMSNormalization")
def _rms_norm(imp, name, ins, at):
    x, gamma = ins[0], _opt(ins, 1)
    axis = at.get("axis", -1) % len(x.shape)
    inner = int(np.prod(x.shape[axis:]))
    flat = imp.e.reshape(x, x.shape[:axis] + (inner,), name + "_flat")
    args = [flat] + ([_param(imp, name, gamma, x.shape[axis:], inner)] if gamma is not None
                     else [])
    y = imp.op("rms_norm", *args, name=name, eps=float(at.get("epsilon", 1e-5)))
    return imp.e.reshape(y, x.shape, name + "_out")


HANDLERS["com.microsoft.SimplifiedLayerNormalization"] = _rms_norm


def _reduce(op):
    def h(imp, name, ins, at):
        x = ins[0]
        axes = _axes_of(imp, name, ins, at)
        keep = bool(at.get("keepdims", 1))
        if not axes:
            if at.get("noop_with_empty_axes", 0):
                return x
            axes = list(range(len(x.shape)))
        axes = tuple(sorted(a % len(x.shape) for a in axes))
        if op == "sum_square":
            return imp.op("sum", imp.op("mul", x, x, name=name + "_sq"), name=name, axis=axes,
                          keepdims=keep)
        if op == "l2":
            s = imp.op("sum", imp.op("mul", x, x, name=name + "_sq"), name=name + "_sum",
                       axis=axes, keepdims=keep)
            return imp.op("sqrt", s, name=name)
        return imp.op(op, x, name=name, axis=axes, keepdims=keep)
    return h


for _k, _op in {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max",
                "ReduceMin": "min", "ReduceProd": "prod", "ReduceSumSquare": "sum_square",
                "ReduceL2": "l2"}.items():
    HANDLERS[_k] = _reduce(_op)
