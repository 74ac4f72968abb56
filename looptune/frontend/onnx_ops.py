"""The translations of ONNX operators (opsets 13 to 21) into graph operators, one handler
each: `handler(imp, name, inputs, attrs) -> Value or list of Values`, where `imp` is the
importer of onnx.py (imp.op emits a node, or folds it when its inputs are constants; imp.node
is the ONNX node; imp.opset its opset). A handler refuses what it cannot translate with an
ImportError_ that says why; the importer collects the refusals into one error.

Here: elementwise operators, casts, constants and shapes, data movement; onnx_nn.py has
matmul, convolution, pooling, resize, normalization and reductions."""
from __future__ import annotations


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
    return imp.op("where", keep, x, imp.const(name + "_zero", np.zeros((), np.float32)),
                  name=name)


def _scalar(v):
    """The number a one-element constant holds, else None."""
    if v is not None and v.is_const and v.data.size == 1:
        x = v.data.reshape(-1)[0]
        return bool(x) if v.data.dtype == np.bool_ else x.item()
    return None


@_on("Clip")
def _clip(imp, name, ins, at):
    """A missing float bound is float32's lowest or highest number (ONNX's default), so
    infinities become finite as in ONNX Runtime."""
    x, lo, hi = ins[0], _opt(ins, 1), _opt(ins, 2)
    bounds = {}
    if x.dtype == "float32":
        bounds = {"min": float(np.finfo(np.float32).min), "max": float(np.finfo(np.float32).max)}
    for key, v in (("min", lo), ("max", hi)):
        if v is not None and (_scalar(v) is None or x.dtype != "float32"):
            # a tensor bound, or an integer one: an elementwise max / min
            x = imp.op("maximum" if key == "min" else "minimum", x, v, name=f"{name}_{key}")
            bounds.pop(key, None)
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
                if op == "pow" and s == 2 and not rev:  # rev: 2 ** x, no square
                    return imp.op("mul", x, x, name=name)
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


# ------------------------------------------------------------------ shapes and data movement
@_on("Flatten")
def _flatten(imp, name, ins, at):
    x = ins[0]
    axis = int(at.get("axis", 1))
    axis = axis + len(x.shape) if axis < 0 else axis  # 0 to rank: rank makes (size, 1)
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


def _expand_to(imp, name, x, shape):
    shape = tuple(shape)
    if x.shape == shape:
        return x
    return imp.op("expand", x, name=name, shape=shape)


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
