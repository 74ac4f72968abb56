"""Translations of core ATen operators into graph operators, one handler per operator:
`handler(e, name, *args, **kwargs)` with the node's tensor arguments as graph Values (a
TorchEmitter `e` whose `node` is the FX node). A handler raises ImportError_ to refuse an
attribute; the importer (torch.py) collects the refusals."""
from __future__ import annotations

import math

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


def _on(*keys):
    def deco(fn):
        for k in keys:
            HANDLERS[k] = fn
        return fn
    return deco


def _pair(v):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return (int(v[0]), int(v[-1]))


def _cast(e, x, dtype: str, name: str = "cast"):
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


# ---------------------------------------------------------------------- convolution
@_on("conv2d.default", "conv2d.padding", "conv1d.default", "conv1d.padding")
def _conv(e, name, x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    one_d = len(x.shape) == 3
    if one_d:  # (N, C, L) as (N, C, 1, L)
        x = e.reshape(x, x.shape[:2] + (1,) + x.shape[2:])
        w = e.reshape(w, w.shape[:2] + (1,) + w.shape[2:])
        stride, dilation = (1, _pair(stride)[0]), (1, _pair(dilation)[0])
        padding = padding if isinstance(padding, str) else (0, _pair(padding)[0])
    if len(x.shape) != 4:
        raise ImportError_(f"node {name}: convolution of a {len(x.shape)}-D input; 1-D and 2-D "
                           "convolutions are supported")
    stride, dilation = _pair(stride), _pair(dilation)
    if padding == "valid":
        padding = 0
    elif padding == "same":
        total = [d * (k - 1) for d, k in zip(dilation, w.shape[2:])]
        before = [t // 2 for t in total]
        after = [t - b_ for t, b_ in zip(total, before)]
        if before != after:
            x = e.op("pad", x, name=name + "_pad", pad_before=(0, 0) + tuple(before),
                     pad_after=(0, 0) + tuple(after))
            before = [0, 0]
        padding = tuple(before)
    y = e.op("conv2d", x, w, name=name, stride=stride, padding=_pair(padding),
             dilation=dilation, groups=int(groups))
    if b is not None:
        y = e.op("add", y, e.reshape(b, (1, b.shape[0], 1, 1)), name=name + "_bias")
    return e.reshape(y, y.shape[:2] + y.shape[3:]) if one_d else y


@_on("convolution.default")
def _convolution(e, name, x, w, b, stride, padding, dilation, transposed, output_padding,
                 groups):
    if transposed:
        raise ImportError_(f"node {name}: transposed convolution is not supported")
    return _conv(e, name, x, w, b, stride, padding, dilation, groups)


# ---------------------------------------------------------------------- normalization
@_on("_native_batch_norm_legit_no_training.default", "batch_norm.default")
def _batch_norm(e, name, x, weight, bias, mean, var, *rest):
    training = rest[0] if len(rest) >= 3 else False
    eps = rest[-2] if len(rest) >= 3 else rest[-1]
    if training:
        raise ImportError_(f"node {name}: batch norm in training mode; call model.eval()")
    if not all(v is None or v.is_const for v in (weight, bias, mean, var)):
        raise ImportError_(f"node {name}: batch norm with computed statistics")
    k = x.shape[1]
    w = weight.data if weight is not None else np.ones(k, np.float32)
    b = bias.data if bias is not None else np.zeros(k, np.float32)
    scale = w / np.sqrt(var.data.astype(np.float64) + eps)
    y = e.channel_affine(x, scale, b - mean.data * scale, name)
    return (y, None, None) if "legit" in str(e.node.target) else y


def _norm_last(e, name, x, n_axes, w, b, eps):
    """layer_norm over the last `n_axes` axes, as one layer_norm over a flattened last axis."""
    shape = x.shape
    inner = int(np.prod(shape[len(shape) - n_axes:]))
    if n_axes != 1:
        x = e.reshape(x, shape[:len(shape) - n_axes] + (inner,))
        w = e.reshape(w, (inner,)) if w is not None else None
        b = e.reshape(b, (inner,)) if b is not None else None
    if w is None and b is not None:
        w = e.const(name + "_gamma", np.ones(inner, np.float32))
    args = [x] + [v for v in (w, b) if v is not None]
    return e.reshape(e.op("layer_norm", *args, name=name, eps=float(eps)), shape)


@_on("layer_norm.default")
def _layer_norm(e, name, x, shape, w=None, b=None, eps=1e-5, cudnn=False):
    return _norm_last(e, name, x, len(shape), w, b, eps)


@_on("native_layer_norm.default")
def _native_layer_norm(e, name, x, shape, w, b, eps):
    return (_norm_last(e, name, x, len(shape), w, b, eps), None, None)


def _group_norm_value(e, name, x, groups, w, b, eps):
    n, c = x.shape[:2]
    grouped = e.reshape(x, (n, groups, int(np.prod(x.shape[1:])) // groups))
    y = _norm_last(e, name, grouped, 1, None, None, eps)
    y = e.reshape(y, x.shape)
    cshape = (1, c) + (1,) * (len(x.shape) - 2)
    if w is not None:
        y = e.op("mul", y, e.reshape(w, cshape), name=name + "_scale")
    if b is not None:
        y = e.op("add", y, e.reshape(b, cshape), name=name + "_shift")
    return y


@_on("native_group_norm.default")
def _native_group_norm(e, name, x, w, b, n, c, hw, groups, eps):
    return (_group_norm_value(e, name, x, int(groups), w, b, eps), None, None)


@_on("group_norm.default")
def _group_norm(e, name, x, groups, w=None, b=None, eps=1e-5, cudnn=False):
    return _group_norm_value(e, name, x, int(groups), w, b, eps)


# ---------------------------------------------------------------------- elementwise
def _unary(op, **fixed):
    def h(e, name, x, *rest, **kw):
        return e.op(op, _cast(e, x, "float32"), name=name, **fixed)
    return h


for _k, _op in {"relu": "relu", "sigmoid": "sigmoid", "silu": "silu", "tanh": "tanh",
                "exp": "exp", "sqrt": "sqrt", "erf": "erf", "rsqrt": "rsqrt",
                "reciprocal": "reciprocal", "abs": "abs", "log": "log", "floor": "floor",
                "ceil": "ceil", "sin": "sin", "cos": "cos", "hardswish": "hardswish",
                "mish": "mish", "sign": "sign", "round": "round"}.items():
    HANDLERS[_k + ".default"] = _unary(_op)
HANDLERS["relu_.default"] = _unary("relu")
HANDLERS["hardsigmoid.default"] = _unary("hardsigmoid", alpha=1 / 6, beta=0.5)


@_on("log1p.default")
def _log1p(e, name, x):
    return e.op("log", e.binary("add", _cast(e, x, "float32"), 1.0, name=name + "_plus1"),
                name=name)


@_on("expm1.default")
def _expm1(e, name, x):
    return e.binary("sub", e.op("exp", _cast(e, x, "float32"), name=name + "_exp"), 1.0,
                    name=name)


@_on("neg.default")
def _neg(e, name, x):
    return e.op("neg", x, name=name)


@_on("gelu.default")
def _gelu(e, name, x, approximate="none"):
    return e.op("gelu", x, name=name, approximate=approximate)


@_on("hardtanh.default", "clamp.default")
def _clip(e, name, x, lo=None, hi=None):
    x = _cast(e, x, e.out_dtype)
    return e.op("clip", x, name=name, min=None if lo is None else float(lo),
                max=None if hi is None else float(hi))


@_on("clamp.Tensor")
def _clamp_tensor(e, name, x, lo=None, hi=None):
    if lo is not None:
        x = _binary("maximum")(e, name + "_min", x, lo)
    if hi is not None:
        x = _binary("minimum")(e, name, x, hi)
    return x


@_on("leaky_relu.default")
def _leaky_relu(e, name, x, slope=0.01):
    return e.op("leaky_relu", x, name=name, alpha=float(slope))


@_on("elu.default")
def _elu(e, name, x, alpha=1.0, scale=1.0, input_scale=1.0):
    if scale != 1 or input_scale != 1:
        raise ImportError_(f"node {name}: elu with scale or input_scale (selu) is not supported")
    return e.op("elu", x, name=name, alpha=float(alpha))


@_on("softplus.default")
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
        a, b = _cast(e, a, dtype, name + "_a"), _cast(e, b, dtype, name + "_b")
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


@_on("logical_not.default")
def _logical_not(e, name, x):
    return e.op("logical_not", _cast(e, x, "int32"), name=name)


@_on("bitwise_not.default")
def _bitwise_not(e, name, x):
    if str(e.node.args[0].meta["val"].dtype) != "torch.bool":
        raise ImportError_(f"node {name}: bitwise_not of a non-boolean tensor")
    return e.op("logical_not", x, name=name)


@_on("isnan.default")
def _isnan(e, name, x):
    return e.op("isnan", x, name=name)


@_on("rsub.Scalar", "rsub.Tensor")
def _rsub(e, name, a, b, alpha=1):
    if alpha != 1:
        a = e.binary("mul", a, alpha, name=name + "_alpha")
    return _binary("sub")(e, name, b, a)


@_on("pow.Tensor_Scalar")
def _pow(e, name, x, p):
    x = _cast(e, x, e.out_dtype)
    if p == 2:
        return e.op("mul", x, x, name=name)
    if p == 1:
        return x
    if p == 0.5:
        return e.op("sqrt", x, name=name)
    return e.binary("pow", x, p, name=name)


@_on("pow.Tensor_Tensor", "pow.Scalar")
def _pow_tensor(e, name, a, b):
    return _binary("pow")(e, name, a, b)


@_on("where.self", "where.ScalarOther", "where.ScalarSelf", "where.Scalar")
def _where(e, name, cond, x, y):
    dtype = e.out_dtype
    ndim = len(e.out_shape)

    def operand(v):
        if not isinstance(v, Value):
            v = e.const(name + "_value", np.full((1,) * ndim, v, dtype))
        v = _cast(e, v, dtype)
        if v.is_const and len(v.shape) < ndim:
            v = e.reshape(v, (1,) * (ndim - len(v.shape)) + v.shape)
        return v
    return e.op("where", _cast(e, cond, "int32"), operand(x), operand(y), name=name)


@_on("_to_copy.default", "to.dtype", "_to_dtype.default")
def _to_copy(e, name, x, *rest, **kw):
    return _cast(e, x, e.out_dtype, name)


@_on("full_like.default", "zeros_like.default", "ones_like.default", "empty_like.default",
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


# ---------------------------------------------------------------------- pooling
def _pool_attrs(name, x, kernel, stride, padding, ceil_mode):
    kernel = _pair(kernel)
    attrs = dict(kernel=kernel, stride=_pair(stride) if stride else kernel,
                 padding=_pair(padding))
    if ceil_mode:
        attrs["ceil_mode"] = True
    return attrs


@_on("max_pool2d_with_indices.default", "max_pool2d.default")
def _max_pool(e, name, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    if _pair(dilation) != (1, 1):
        raise ImportError_(f"node {name}: max_pool2d with dilation is not supported")
    y = e.op("max_pool2d", x, name=name, **_pool_attrs(name, x, kernel, stride, padding,
                                                       ceil_mode))
    return (y, None) if "indices" in str(e.node.target) else y


@_on("avg_pool2d.default")
def _avg_pool(e, name, x, kernel, stride=(), padding=0, ceil_mode=False,
              count_include_pad=True, divisor_override=None):
    if divisor_override is not None:
        raise ImportError_(f"node {name}: avg_pool2d with divisor_override is not supported")
    attrs = _pool_attrs(name, x, kernel, stride, padding, ceil_mode)
    if not count_include_pad and any(attrs["padding"]):
        attrs["count_include_pad"] = False
    return e.op("avg_pool2d", x, name=name, **attrs)


def _adaptive(e, name, x, output_size):
    oh, ow = _pair(output_size)
    H, W = x.shape[2], x.shape[3]
    if (oh, ow) == (1, 1):
        return e.op("mean", x, name=name, axis=(2, 3), keepdims=True)
    if H % oh or W % ow:
        raise ImportError_(f"node {name}: adaptive_avg_pool2d from {H}x{W} to {oh}x{ow} needs "
                           "the input size to be a multiple of the output size")
    return e.op("avg_pool2d", x, name=name, kernel=(H // oh, W // ow), stride=(H // oh, W // ow))


HANDLERS["adaptive_avg_pool2d.default"] = _adaptive
HANDLERS["_adaptive_avg_pool2d.default"] = _adaptive


# ---------------------------------------------------------------------- reductions
def _reduce(op):
    def h(e, name, x, dims=None, keepdim=False, dtype=None, **kw):
        x = _cast(e, x, e.out_dtype)
        return e.reshape(e.op(op, x, name=name, axis=_dims(x, dims), keepdims=bool(keepdim)),
                         e.out_shape)
    return h


for _k, _op in {"mean.dim": "mean", "mean.default": "mean", "sum.dim_IntList": "sum",
                "sum.default": "sum", "amax.default": "max", "amin.default": "min",
                "max.default": "max", "min.default": "min", "prod.default": "prod"}.items():
    HANDLERS[_k] = _reduce(_op)


@_on("var.correction", "var_mean.correction", "var.dim", "std.correction")
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


@_on("softmax.int", "_softmax.default")
def _softmax(e, name, x, dim, *rest):
    return e.op("softmax", _cast(e, x, "float32"), name=name, axis=int(dim))


@_on("log_softmax.int", "_log_softmax.default")
def _log_softmax(e, name, x, dim, *rest):
    return e.op("log_softmax", _cast(e, x, "float32"), name=name, axis=int(dim))


@_on("cumsum.default")
def _cumsum(e, name, x, dim, dtype=None):
    """A running sum along `dim` as a matmul with a triangular matrix of ones (exact for
    integers below 2**24)."""
    dim = int(dim) % len(x.shape)
    n = x.shape[dim]
    perm = [d for d in range(len(x.shape)) if d != dim] + [dim]
    xt = _transpose_value(e, name + "_t", _cast(e, x, "float32"), perm)
    tri = e.const(name + "_ones", np.triu(np.ones((n, n), np.float32)))
    y = e.matmul(xt, tri, name)
    y = _transpose_value(e, name + "_back", y, list(np.argsort(perm)))
    return _cast(e, y, e.out_dtype, name + "_cast")


# ---------------------------------------------------------------------- matmul
@_on("linear.default")
def _linear(e, name, x, w, b=None):
    lead = x.shape[:-1]
    x2 = e.reshape(x, (int(np.prod(lead)), x.shape[-1]))
    y = e.op("matmul", x2, w, name=name, transpose_b=True)
    if b is not None:
        y = e.op("add", y, b, name=name + "_bias")
    return e.reshape(y, lead + (w.shape[0],))


@_on("addmm.default")
def _addmm(e, name, bias, x, w, beta=1, alpha=1):
    y = e.op("matmul", x, w, name=name)
    if alpha != 1:
        y = e.binary("mul", y, alpha, name=name + "_alpha")
    if beta != 1:
        bias = e.binary("mul", bias, beta, name=name + "_beta")
    return e.op("add", y, bias, name=name + "_bias") if beta != 0 else y


@_on("matmul.default", "mm.default", "bmm.default")
def _matmul(e, name, a, b):
    if len(a.shape) > 2 and len(b.shape) > 2 and a.shape[:-2] != b.shape[:-2]:
        lead = e.out_shape[:-2]
        a = _expand_to(e, a, lead + a.shape[-2:], name + "_a")
        b = _expand_to(e, b, lead + b.shape[-2:], name + "_b")
    if len(a.shape) == 2 and len(b.shape) > 2:
        a = _expand_to(e, a, b.shape[:-2] + a.shape, name + "_a")
    return e.matmul(a, b, name)


def _expand_to(e, x, shape, name):
    shape = tuple(int(s) for s in shape)
    if len(x.shape) < len(shape):
        x = e.reshape(x, (1,) * (len(shape) - len(x.shape)) + x.shape)
    if x.shape == shape:
        return x
    if x.is_const:
        return e.const(x.name, np.ascontiguousarray(np.broadcast_to(x.data, shape)))
    return e.op("expand", x, name=name, shape=shape)


@_on("expand.default", "expand_copy.default")
def _expand(e, name, x, sizes, implicit=False):
    return _expand_to(e, x, e.out_shape, name)


@_on("scaled_dot_product_attention.default")
def _sdpa(e, name, q, k, v, mask=None, dropout=0.0, is_causal=False, scale=None,
          enable_gqa=False):
    if enable_gqa and q.shape[-3] != k.shape[-3]:
        raise ImportError_(f"node {name}: grouped-query attention (enable_gqa) is not supported")
    if mask is not None and mask.dtype == "int32":  # boolean: True takes part
        if mask.is_const:
            mask = e.const(name + "_mask", np.where(mask.data != 0, 0.0, -np.inf)
                           .astype(np.float32))
        else:
            mask = e.op("where", mask, e.const(name + "_zero", np.zeros((1,), np.float32)),
                        e.const(name + "_ninf", np.full((1,), -np.inf, np.float32)),
                        name=name + "_mask")
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return e.op("attention", q, k, v, *([mask] if mask is not None else []), name=name,
                scale=scale, causal=bool(is_causal))


# ---------------------------------------------------------------------- shapes
@_on("flatten.using_ints")
def _flatten(e, name, x, start=0, end=-1):
    return e.reshape(x, e.out_shape, name=name)


@_on("view.default", "reshape.default", "_unsafe_view.default", "unsqueeze.default",
     "squeeze.dim", "squeeze.dims", "squeeze.default", "view_copy.default")
def _view(e, name, x, *rest):
    return e.reshape(x, e.out_shape, name=name)


@_on("as_strided.default")
def _as_strided(e, name, x, size, stride, offset=0):
    """Only as a view: the input's bytes in order (a reshape)."""
    expect, acc = [], 1
    for s in reversed(list(size)):
        expect.append(acc)
        acc *= int(s)
    expect = expect[::-1]
    if offset or acc != int(np.prod(x.shape)) or any(
            int(st) != ex for st, ex, s in zip(stride, expect, size) if int(s) != 1):
        raise ImportError_(f"node {name}: as_strided with strides {list(stride)} that are not "
                           "a contiguous view")
    return e.reshape(x, e.out_shape, name=name)


def _transpose_value(e, name, x, perm):
    perm = [int(p) for p in perm]
    if x.is_const:
        return e.const(x.name, np.ascontiguousarray(np.transpose(x.data, perm)))
    if tuple(perm) == tuple(range(len(perm))):
        return x
    return e.op("transpose", x, name=name, perm=tuple(perm))


@_on("transpose.int")
def _transpose(e, name, x, d0, d1):
    perm = list(range(len(x.shape)))
    d0, d1 = d0 % len(perm), d1 % len(perm)
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _transpose_value(e, name, x, perm)


@_on("permute.default")
def _permute(e, name, x, dims):
    return _transpose_value(e, name, x, [d % len(x.shape) for d in dims])


@_on("t.default")
def _t(e, name, x):
    return _transpose_value(e, name, x, [1, 0]) if len(x.shape) == 2 else x


@_on("embedding.default")
def _embedding(e, name, w, ids, *rest):
    return e.op("embedding", w, _cast(e, ids, "int32"), name=name)


@_on("index_select.default")
def _index_select(e, name, x, dim, index):
    return e.op("gather", x, index, name=name, axis=int(dim) % len(x.shape))


@_on("gather.default")
def _gather(e, name, x, dim, index, sparse_grad=False):
    return e.op("gather_elements", x, index, name=name, axis=int(dim) % len(x.shape))


@_on("select.int")
def _select(e, name, x, dim, index):
    dim = dim % len(x.shape)
    index = index % x.shape[dim]
    y = e.op("slice", x, name=name + "_slice", axis=dim, start=index, stop=index + 1)
    return e.reshape(y, e.out_shape, name=name)


@_on("cat.default", "concat.default")
def _cat(e, name, xs, dim=0):
    dtype = e.out_dtype
    xs = [_cast(e, x, dtype) for x in xs if int(np.prod(x.shape)) != 0]
    if len(xs) == 1:
        return xs[0]
    return e.op("concat", *xs, name=name, axis=int(dim) % len(e.out_shape))


@_on("stack.default")
def _stack(e, name, xs, dim=0):
    dim = dim % len(e.out_shape)
    xs = [e.reshape(x, x.shape[:dim] + (1,) + x.shape[dim:]) for x in xs]
    return e.op("concat", *xs, name=name, axis=dim)


@_on("slice.Tensor")
def _slice(e, name, x, dim=0, start=None, end=None, step=1):
    dim = dim % len(x.shape)
    start, stop, step = slice(start, end, step).indices(x.shape[dim])
    if (start, stop, step) == (0, x.shape[dim], 1):
        return x
    return e.op("slice", x, name=name, axis=dim, start=start, stop=stop, step=int(step))


@_on("split_with_sizes.default", "split.Tensor", "split_with_sizes_copy.default")
def _split(e, name, x, sizes, dim=0):
    dim = dim % len(x.shape)
    if isinstance(sizes, int):
        n = x.shape[dim]
        sizes = [min(sizes, n - i) for i in range(0, n, sizes)]
    out, start = [], 0
    for i, s in enumerate(sizes):
        out.append(_slice(e, f"{name}_{i}", x, dim, start, start + int(s)))
        start += int(s)
    return tuple(out)


@_on("getitem")
def _getitem(e, name, xs, i):
    if xs[i] is None:
        raise ImportError_(f"node {name}: output {i} of a multi-output operator (indices or "
                           "saved statistics) is not computed")
    return xs[i]


@_on("constant_pad_nd.default")
def _pad(e, name, x, pad, value=0.0):
    nd = len(x.shape)
    before, after = [0] * nd, [0] * nd
    for i in range(len(pad) // 2):  # torch lists the last axis first
        before[nd - 1 - i], after[nd - 1 - i] = int(pad[2 * i]), int(pad[2 * i + 1])
    if min(before + after) < 0:
        raise ImportError_(f"node {name}: negative padding (cropping) is not supported")
    return e.op("pad", x, name=name, pad_before=tuple(before), pad_after=tuple(after),
                value=float(value))


@_on("upsample_nearest2d.vec", "upsample_nearest2d.default", "upsample_bilinear2d.vec",
     "upsample_bilinear2d.default")
def _upsample(e, name, x, *rest, **kw):
    linear = "bilinear" in str(e.node.target)
    align = bool(rest[1]) if linear and len(rest) > 1 else bool(kw.get("align_corners", False))
    attrs = dict(mode="linear" if linear else "nearest", sizes=e.out_shape,
                 coordinate_transformation_mode="align_corners" if align else
                 ("half_pixel" if linear else "asymmetric"))
    if not linear:
        attrs["nearest_mode"] = "floor"
    return e.op("resize", x, name=name, **attrs)


@_on("dropout.default", "contiguous.default", "clone.default", "alias.default",
     "detach.default", "lift_fresh_copy.default", "native_dropout.default")
def _identity(e, name, x, *rest, **kw):
    return (x, None) if "native_dropout" in str(e.node.target) else x


HANDLERS["<built-in function getitem>"] = _getitem
