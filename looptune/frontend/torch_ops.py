"""Translations of core ATen operators into graph operators, one handler per operator:
`handler(e, name, *args, **kwargs)` with the node's tensor arguments as graph Values (a
TorchEmitter `e` whose `node` is the FX node). A handler raises ImportError_ to refuse an
attribute; the importer (torch.py) collects the refusals."""
from __future__ import annotations


import numpy as np

from ..graph.ir import Value
from .common import ImportError_

HANDLERS: dict = {}
# operators with no value to translate (runtime assertions)
SKIP = {"_assert_tensor_metadata.default", "_assert_scalar.default", "sym_constrain_range."
        "default", "sym_constrain_range_for_size.default", "_assert_async.msg"}


def graph_dtype(torch_dtype) -> str:
    """float32 for every floating type, int32 for integers and booleans."""
    return "float32" if torch_dtype.is_floating_point else "int32"


def on(*keys):
    def deco(fn):
        for k in keys:
            HANDLERS[k] = fn
        return fn
    return deco


def pair(v):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return (int(v[0]), int(v[-1]))


def cast(e, x, dtype: str, name: str = "cast"):
    if not isinstance(x, Value) or x.dtype == dtype:
        return x
    if x.is_const:
        return e.const(x.name, x.data.astype(dtype))
    return e.op("cast", x, name=name, dtype=dtype)


def _scalar_of(e, x, other):
    """A one-element constant as a Python number, where that keeps the output's shape."""
    if isinstance(x, Value) and x.is_const and x.data.size == 1 and isinstance(other, Value) \
            and other.shape == e.out_shape:
        return x.data.reshape(()).item()
    return x


def _dims(x, dims):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(len(x.shape)))
    dims = dims if isinstance(dims, (list, tuple)) else [dims]
    return tuple(int(d) % max(len(x.shape), 1) for d in dims)


def transpose_value(e, name, x, perm):
    perm = [int(p) for p in perm]
    if x.is_const:
        return e.const(x.name, np.ascontiguousarray(np.transpose(x.data, perm)))
    if tuple(perm) == tuple(range(len(perm))):
        return x
    return e.op("transpose", x, name=name, perm=tuple(perm))


def expand_to(e, x, shape, name):
    shape = tuple(int(s) for s in shape)
    if len(x.shape) < len(shape):
        x = e.reshape(x, (1,) * (len(shape) - len(x.shape)) + x.shape)
    if x.shape == shape:
        return x
    if x.is_const:
        return e.const(x.name, np.ascontiguousarray(np.broadcast_to(x.data, shape)))
    return e.op("expand", x, name=name, shape=shape)


# ---------------------------------------------------------------------- elementwise
def _unary(op, **fixed):
    def h(e, name, x, *rest, **kw):
        return e.op(op, cast(e, x, "float32"), name=name, **fixed)
    return h


for _k, _op in {"relu": "relu", "sigmoid": "sigmoid", "silu": "silu", "tanh": "tanh",
                "exp": "exp", "sqrt": "sqrt", "erf": "erf", "rsqrt": "rsqrt",
                "reciprocal": "reciprocal", "abs": "abs", "log": "log", "floor": "floor",
                "ceil": "ceil", "sin": "sin", "cos": "cos", "hardswish": "hardswish",
                "mish": "mish", "sign": "sign", "round": "round"}.items():
    HANDLERS[_k + ".default"] = _unary(_op)
HANDLERS["relu_.default"] = _unary("relu")
HANDLERS["hardsigmoid.default"] = _unary("hardsigmoid", alpha=1 / 6, beta=0.5)


@on("log1p.default")
def _log1p(e, name, x):
    return e.op("log", e.binary("add", cast(e, x, "float32"), 1.0, name=name + "_plus1"),
                name=name)


@on("expm1.default")
def _expm1(e, name, x):
    return e.binary("sub", e.op("exp", cast(e, x, "float32"), name=name + "_exp"), 1.0,
                    name=name)


@on("neg.default")
def _neg(e, name, x):
    return e.op("neg", x, name=name)


@on("gelu.default")
def _gelu(e, name, x, approximate="none"):
    return e.op("gelu", x, name=name, approximate=approximate)


@on("hardtanh.default", "clamp.default")
def _clip(e, name, x, lo=None, hi=None):
    x = cast(e, x, e.out_dtype)
    return e.op("clip", x, name=name, min=None if lo is None else float(lo),
                max=None if hi is None else float(hi))


@on("clamp_min.default")
def _clamp_min(e, name, x, lo):
    return _clip(e, name, x, lo, None)


@on("clamp_max.default")
def _clamp_max(e, name, x, hi):
    return _clip(e, name, x, None, hi)


@on("clamp.Tensor")
def _clamp_tensor(e, name, x, lo=None, hi=None):
    if lo is not None:
        x = _binary("maximum")(e, name + "_min", x, lo)
    if hi is not None:
        x = _binary("minimum")(e, name, x, hi)
    return x


@on("leaky_relu.default")
def _leaky_relu(e, name, x, slope=0.01):
    return e.op("leaky_relu", x, name=name, alpha=float(slope))


@on("elu.default")
def _elu(e, name, x, alpha=1.0, scale=1.0, input_scale=1.0):
    if scale != 1 or input_scale != 1:
        raise ImportError_(f"node {name}: elu with scale or input_scale (selu) is not supported")
    return e.op("elu", x, name=name, alpha=float(alpha))


@on("softplus.default")
def _softplus(e, name, x, beta=1, threshold=20):
    if beta != 1:
        raise ImportError_(f"node {name}: softplus with beta={beta} is not supported")
    return e.op("softplus", x, name=name)


def _binary(op, compare=False):
    def h(e, name, a, b, alpha=1, **kw):
        if kw.get("rounding_mode") is not None:
            raise ImportError_(f"node {name}: division with rounding_mode="
                               f"{kw['rounding_mode']!r} is not supported")
        a, b = _scalar_of(e, a, b), _scalar_of(e, b, a)
        if compare:  # the operands' common type
            floats = any(v.dtype == "float32" if isinstance(v, Value) else isinstance(v, float)
                         for v in (a, b))
            dtype = "float32" if floats else "int32"
        else:
            dtype = e.out_dtype
        a, b = cast(e, a, dtype, name + "_a"), cast(e, b, dtype, name + "_b")
        if dtype == "int32":  # a number as a scalar= attribute would make the result float
            ndim = len(e.out_shape)
            a, b = (v if isinstance(v, Value) else
                    e.const(name + "_k", np.full((1,) * ndim, v, np.int32)) for v in (a, b))
        if alpha != 1:
            b = e.binary("mul", b, alpha, name=name + "_alpha") if isinstance(b, Value) \
                else b * alpha
        if not isinstance(a, Value) and not isinstance(b, Value):
            raise ImportError_(f"node {name}: {op} of two numbers")
        return e.binary(op, a, b, name=name)
    return h


for _k, _op in {"add": "add", "sub": "sub", "mul": "mul", "div": "div"}.items():
    for _v in ("Tensor", "Scalar", "Tensor_mode"):
        HANDLERS[f"{_k}.{_v}"] = _binary(_op)
for _k, _op in {"maximum": "maximum", "minimum": "minimum"}.items():
    HANDLERS[_k + ".default"] = _binary(_op)
for _k, _op in {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
                "gt": "greater", "ge": "greater_equal"}.items():
    HANDLERS[_k + ".Tensor"] = HANDLERS[_k + ".Scalar"] = _binary(_op, compare=True)
for _k in ("logical_and", "logical_or"):
    HANDLERS[_k + ".default"] = _binary(_k, compare=True)


@on("logical_not.default")
def _logical_not(e, name, x):
    return e.op("logical_not", cast(e, x, "int32"), name=name)


@on("bitwise_not.default")
def _bitwise_not(e, name, x):
    if str(e.node.args[0].meta["val"].dtype) != "torch.bool":
        raise ImportError_(f"node {name}: bitwise_not of a non-boolean tensor")
    return e.op("logical_not", x, name=name)


@on("isnan.default")
def _isnan(e, name, x):
    return e.op("isnan", x, name=name)


@on("rsub.Scalar", "rsub.Tensor")
def _rsub(e, name, a, b, alpha=1):
    if alpha != 1:
        a = e.binary("mul", a, alpha, name=name + "_alpha")
    return _binary("sub")(e, name, b, a)


@on("pow.Tensor_Scalar")
def _pow(e, name, x, p):
    x = cast(e, x, e.out_dtype)
    if p == 2:
        return e.op("mul", x, x, name=name)
    if p == 1:
        return x
    if p == 0.5:
        return e.op("sqrt", x, name=name)
    return e.binary("pow", x, p, name=name)


@on("pow.Tensor_Tensor", "pow.Scalar")
def _pow_tensor(e, name, a, b):
    return _binary("pow")(e, name, a, b)


@on("where.self", "where.ScalarOther", "where.ScalarSelf", "where.Scalar")
def _where(e, name, cond, x, y):
    dtype = e.out_dtype
    ndim = len(e.out_shape)

    def operand(v):
        if not isinstance(v, Value):
            v = e.const(name + "_value", np.full((1,) * ndim, v, dtype))
        v = cast(e, v, dtype)
        if v.is_const and len(v.shape) < ndim:
            v = e.reshape(v, (1,) * (ndim - len(v.shape)) + v.shape)
        return v
    return e.op("where", cast(e, cond, "int32"), operand(x), operand(y), name=name)


@on("_to_copy.default", "to.dtype", "_to_dtype.default")
def _to_copy(e, name, x, *rest, **kw):
    return cast(e, x, e.out_dtype, name)


@on("full_like.default", "zeros_like.default", "ones_like.default", "empty_like.default",
     "new_zeros.default", "new_ones.default", "new_full.default", "new_empty.default")
def _like(e, name, x, *rest, **kw):
    """The value does not depend on the input's values: torch computes it on a stand-in."""
    import torch
    meta = e.node.args[0].meta["val"]
    out = e.node.target(torch.zeros(tuple(meta.shape), dtype=meta.dtype), *rest, **kw)
    if "empty" in name:
        out = torch.zeros_like(out)
    return e.const(name, out.float().numpy() if out.dtype.is_floating_point
                   else out.int().numpy())


# ---------------------------------------------------------------------- reductions
def _reduce(op):
    def h(e, name, x, dims=None, keepdim=False, dtype=None, **kw):
        x = cast(e, x, e.out_dtype)
        return e.reshape(e.op(op, x, name=name, axis=_dims(x, dims), keepdims=bool(keepdim)),
                         e.out_shape)
    return h


for _k, _op in {"mean.dim": "mean", "mean.default": "mean", "sum.dim_IntList": "sum",
                "sum.default": "sum", "amax.default": "max", "amin.default": "min",
                "max.default": "max", "min.default": "min", "prod.default": "prod"}.items():
    HANDLERS[_k] = _reduce(_op)


@on("max.dim", "min.dim")
def _max_dim(e, name, x, dim, keepdim=False):
    """The values only; the indices output is not computed."""
    op = "max" if str(e.node.target).startswith("aten.max") else "min"
    values = e.op(op, cast(e, x, e.out_dtype), name=name, axis=(int(dim) % len(x.shape),),
                  keepdims=bool(keepdim))
    return (e.reshape(values, e.out_shape), None)


@on("var.correction", "var_mean.correction", "var.dim", "std.correction")
def _var(e, name, x, dims=None, correction=None, keepdim=False, **kw):
    """mean((x - mean(x))^2) * n / (n - correction)."""
    if "unbiased" in kw:
        correction = 1 if kw["unbiased"] else 0
    correction = 1 if correction is None else correction
    axes = _dims(x, dims)
    n = int(np.prod([x.shape[a] for a in axes]))
    mean = e.op("mean", x, name=name + "_mean", axis=axes, keepdims=True)
    d = e.op("sub", x, mean, name=name + "_centered")
    var = e.op("mean", e.op("mul", d, d, name=name + "_sq"), name=name + "_var", axis=axes,
               keepdims=bool(keepdim))
    if n != correction and correction:
        var = e.binary("mul", var, n / (n - correction), name=name + "_corrected")
    target = str(e.node.target)
    if "std" in target:
        return e.op("sqrt", var, name=name)
    if "var_mean" in target:
        return (var, mean if keepdim else e.reshape(mean, var.shape))
    return var


@on("softmax.int", "_softmax.default")
def _softmax(e, name, x, dim, *rest):
    return e.op("softmax", cast(e, x, "float32"), name=name, axis=int(dim))


@on("log_softmax.int", "_log_softmax.default")
def _log_softmax(e, name, x, dim, *rest):
    return e.op("log_softmax", cast(e, x, "float32"), name=name, axis=int(dim))


@on("cumsum.default")
def _cumsum(e, name, x, dim, dtype=None):
    """A running sum along `dim` as a matmul with a triangular matrix of ones (exact for
    integers below 2**24)."""
    dim = int(dim) % len(x.shape)
    n = x.shape[dim]
    perm = [d for d in range(len(x.shape)) if d != dim] + [dim]
    xt = transpose_value(e, name + "_t", cast(e, x, "float32"), perm)
    tri = e.const(name + "_ones", np.triu(np.ones((n, n), np.float32)))
    y = e.matmul(xt, tri, name)
    y = transpose_value(e, name + "_back", y, list(np.argsort(perm)))
    return cast(e, y, e.out_dtype, name + "_cast")
