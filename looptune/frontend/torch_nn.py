"""Translations of ATen's network operators: convolution, normalization, pooling, matmul
and attention (see torch_ops.py for the handler convention)."""
from __future__ import annotations

import math

import numpy as np

from .common import ImportError_
from .torch_ops import expand_to, on, pair
from .torch_quant import int8_conv, int8_linear


# ---------------------------------------------------------------------- convolution
@on("conv2d.default", "conv2d.padding", "conv1d.default", "conv1d.padding")
def _conv(e, name, x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    quantized = int8_conv(e, name, b, conv, **attrs)  # dequantized operands: int32
    return quantized if quantized is not None else conv(e, name, x, w, b, **attrs)


def conv(e, name, x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """A 1-D or 2-D convolution (torch's arguments), its bias added after it."""
    one_d = len(x.shape) == 3
    if one_d:  # (N, C, L) as (N, C, 1, L)
        x = e.reshape(x, x.shape[:2] + (1,) + x.shape[2:])
        w = e.reshape(w, w.shape[:2] + (1,) + w.shape[2:])
        stride, dilation = (1, pair(stride)[0]), (1, pair(dilation)[0])
        padding = padding if isinstance(padding, str) else (0, pair(padding)[0])
    if len(x.shape) != 4:
        raise ImportError_(f"node {name}: convolution of a {len(x.shape)}-D input; 1-D and 2-D "
                           "convolutions are supported")
    stride, dilation = pair(stride), pair(dilation)
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
    y = e.op("conv2d", x, w, name=name, stride=stride, padding=pair(padding),
             dilation=dilation, groups=int(groups))
    if b is not None:
        y = e.op("add", y, e.reshape(b, (1, b.shape[0], 1, 1)), name=name + "_bias")
    return e.reshape(y, y.shape[:2] + y.shape[3:]) if one_d else y


@on("convolution.default")
def _convolution(e, name, x, w, b, stride, padding, dilation, transposed, output_padding,
                 groups):
    if transposed:
        raise ImportError_(f"node {name}: transposed convolution is not supported")
    return _conv(e, name, x, w, b, stride, padding, dilation, groups)


# ---------------------------------------------------------------------- normalization
@on("_native_batch_norm_legit_no_training.default", "batch_norm.default")
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


@on("layer_norm.default")
def _layer_norm(e, name, x, shape, w=None, b=None, eps=1e-5, cudnn=False):
    return _norm_last(e, name, x, len(shape), w, b, eps)


@on("native_layer_norm.default")
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


@on("native_group_norm.default")
def _native_group_norm(e, name, x, w, b, n, c, hw, groups, eps):
    return (_group_norm_value(e, name, x, int(groups), w, b, eps), None, None)


@on("group_norm.default")
def _group_norm(e, name, x, groups, w=None, b=None, eps=1e-5, cudnn=False):
    return _group_norm_value(e, name, x, int(groups), w, b, eps)


# ---------------------------------------------------------------------- pooling
def _pool_attrs(name, x, kernel, stride, padding, ceil_mode):
    kernel = pair(kernel)
    attrs = dict(kernel=kernel, stride=pair(stride) if stride else kernel,
                 padding=pair(padding))
    if ceil_mode:
        attrs["ceil_mode"] = True
    return attrs


@on("max_pool2d_with_indices.default", "max_pool2d.default")
def _max_pool(e, name, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    if pair(dilation) != (1, 1):
        raise ImportError_(f"node {name}: max_pool2d with dilation is not supported")
    y = e.op("max_pool2d", x, name=name, **_pool_attrs(name, x, kernel, stride, padding,
                                                       ceil_mode))
    return (y, None) if "indices" in str(e.node.target) else y


@on("avg_pool2d.default")
def _avg_pool(e, name, x, kernel, stride=(), padding=0, ceil_mode=False,
              count_include_pad=True, divisor_override=None):
    if divisor_override is not None:
        raise ImportError_(f"node {name}: avg_pool2d with divisor_override is not supported")
    attrs = _pool_attrs(name, x, kernel, stride, padding, ceil_mode)
    if not count_include_pad and any(attrs["padding"]):
        attrs["count_include_pad"] = False
    return e.op("avg_pool2d", x, name=name, **attrs)


@on("adaptive_avg_pool2d.default", "_adaptive_avg_pool2d.default")
def _adaptive(e, name, x, output_size):
    oh, ow = pair(output_size)
    H, W = x.shape[2], x.shape[3]
    if (oh, ow) == (1, 1):
        return e.op("mean", x, name=name, axis=(2, 3), keepdims=True)
    if H % oh or W % ow:
        raise ImportError_(f"node {name}: adaptive_avg_pool2d from {H}x{W} to {oh}x{ow} needs "
                           "the input size to be a multiple of the output size")
    return e.op("avg_pool2d", x, name=name, kernel=(H // oh, W // ow), stride=(H // oh, W // ow))



# ---------------------------------------------------------------------- matmul
@on("linear.default")
def _linear(e, name, x, w, b=None):
    quantized = int8_linear(e, name, x, b)  # dequantized operands: an int32 matmul
    if quantized is not None:
        return quantized
    lead = x.shape[:-1]
    x2 = e.reshape(x, (int(np.prod(lead)), x.shape[-1]))
    y = e.op("matmul", x2, w, name=name, transpose_b=True)
    if b is not None:
        y = e.op("add", y, b, name=name + "_bias")
    return e.reshape(y, lead + (w.shape[0],))


@on("addmm.default")
def _addmm(e, name, bias, x, w, beta=1, alpha=1):
    y = e.op("matmul", x, w, name=name)
    if alpha != 1:
        y = e.binary("mul", y, alpha, name=name + "_alpha")
    if beta != 1:
        bias = e.binary("mul", bias, beta, name=name + "_beta")
    return e.op("add", y, bias, name=name + "_bias") if beta != 0 else y


@on("matmul.default", "mm.default", "bmm.default")
def _matmul(e, name, a, b):
    if len(a.shape) > 2 and len(b.shape) > 2 and a.shape[:-2] != b.shape[:-2]:
        lead = e.out_shape[:-2]
        a = expand_to(e, a, lead + a.shape[-2:], name + "_a")
        b = expand_to(e, b, lead + b.shape[-2:], name + "_b")
    if len(a.shape) == 2 and len(b.shape) > 2:
        a = expand_to(e, a, b.shape[:-2] + a.shape, name + "_a")
    return e.matmul(a, b, name)


@on("scaled_dot_product_attention.default")
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
