"""ONNX handlers (see onnx_ops.py) for matmul, convolution, pooling, resize, softmax,
normalization and reductions."""
from __future__ import annotations

import math

import numpy as np

from .common import ImportError_
from .onnx_ops import HANDLERS, _axes_of, _expand_to, _on, _opt, _slice_axis
from .onnx_qdq import integer_conv, integer_matmul


# ------------------------------------------------------------------ linear algebra, convolution
@_on("MatMul")
def _matmul(imp, name, ins, at):
    a, b = ins
    y = integer_matmul(imp, name, a, b, lambda x, w: imp.e.matmul(x, w, name + "_acc",
                                                                   emit=imp.op))
    if y is not None:  # a QDQ model's product of dequantized values, in integers
        return y
    if len(b.shape) >= 3 and len(a.shape) >= 2 and a.shape[:-2] != b.shape[:-2]:
        lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])  # broadcast batch dimensions
        a = _expand_to(imp, name + "_a", a, lead + a.shape[-2:])
        b = _expand_to(imp, name + "_b", b, lead + b.shape[-2:])
    return imp.e.matmul(a, b, name, emit=imp.op)  # imp.op folds constant operands


@_on("Einsum")
def _einsum(imp, name, ins, at):
    """One or two operands without a letter repeated in one operand (no diagonals): letters
    only one operand has and the output lacks are summed first; then (batch, free, summed)
    of one and (batch, summed, free) of the other meet in one matrix product."""
    lhs, arrow, out = at["equation"].replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ins) or len(ins) > 2:
        raise ImportError_(f"node {name}: Einsum of {len(ins)} operands is not supported (one "
                           "or two are)")
    # an ellipsis: spare capitals for the dimensions it covers, aligned on the right
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in at["equation"]]
    covered = [len(v.shape) - len(t) + 3 for t, v in zip(terms, ins) if "..." in t]
    dots = "".join(spare[:max(covered, default=0)])
    terms = [t.replace("...", dots[len(dots) - (len(v.shape) - len(t) + 3):]) for t, v in
             zip(terms, ins)]
    if not arrow:  # implicit: the ellipsis, then the letters used once, alphabetically
        joined = "".join(terms)
        out = dots + "".join(sorted(c for c in set(joined) - set(dots) if joined.count(c) == 1))
    out = out.replace("...", dots)
    size = {}
    for t, v in zip(terms, ins):
        if len(set(t)) != len(t) or len(t) != len(v.shape):
            raise ImportError_(f"node {name}: Einsum term {t!r} of an operand of shape "
                               f"{v.shape} is not supported (a repeated letter is a diagonal)")
        for c, n in zip(t, v.shape):
            if size.setdefault(c, n) != n:
                raise ImportError_(f"node {name}: Einsum letter {c} has sizes {size[c]} and {n}")
    vals = []
    for i, (t, v) in enumerate(zip(terms, ins)):  # sum what nothing else needs
        other = terms[1 - i] if len(terms) == 2 else ""
        lone = [c for c in t if c not in out and c not in other]
        if lone:
            v = imp.op("sum", v, name=f"{name}_sum{i}", axis=tuple(t.index(c) for c in lone),
                       keepdims=False)
            t = "".join(c for c in t if c not in lone)
        vals.append((t, v))
    if len(vals) == 1:
        return _permute(imp, name, vals[0][1], vals[0][0], out)
    (ta, a), (tb, b) = vals
    batch = [c for c in out if c in ta and c in tb]
    summed = [c for c in ta if c in tb and c not in out]
    free_a = [c for c in ta if c not in tb]
    free_b = [c for c in tb if c not in ta]
    nb, na, nk, nn = (int(np.prod([size[c] for c in g], dtype=np.int64))
                      for g in (batch, free_a, summed, free_b))
    lead = (nb,) if nb > 1 else ()
    a = imp.e.reshape(_permute(imp, name + "_a", a, ta, "".join(batch + free_a + summed)),
                      lead + (na, nk))
    b = imp.e.reshape(_permute(imp, name + "_b", b, tb, "".join(batch + summed + free_b)),
                      lead + (nk, nn))
    got = batch + free_a + free_b
    y = imp.e.reshape(imp.e.matmul(a, b, name, emit=imp.op), tuple(size[c] for c in got))
    return _permute(imp, name + "_out", y, "".join(got), out)


def _permute(imp, name, v, have: str, want: str):
    if have == want:
        return v
    return imp.op("transpose", v, name=name, perm=tuple(have.index(c) for c in want))


@_on("Gemm")
def _gemm(imp, name, ins, at):
    a, b, c = ins[0], ins[1], _opt(ins, 2)
    tb = bool(at.get("transB", 0))
    y = None if at.get("transA", 0) else integer_matmul(
        imp, name, a, b, lambda x, w: imp.op("matmul", x, w, name=name + "_acc"), tb)
    if y is None:
        if at.get("transA", 0):
            a = imp.op("transpose", a, name=name + "_ta", perm=(1, 0))
        y = imp.op("matmul", a, b, name=name, transpose_b=tb)
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
    y = integer_conv(imp, name, ins, at, _conv)
    if y is not None:  # a QDQ model's convolution of dequantized values, in integers
        return y
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
        if op in ("sum_square", "l2"):
            y = imp.op("sum", imp.op("mul", x, x, name=name + "_sq"), name=name + "_sum",
                       axis=axes, keepdims=keep)
            y = imp.op("sqrt", y, name=name) if op == "l2" else y
        else:
            y = imp.op(op, x, name=name, axis=axes, keepdims=keep)
        if not keep and len(axes) == len(x.shape) and y.shape != ():
            y = imp.e.reshape(y, (), name + "_0d")  # every axis reduced away: 0-d, as in ONNX
        return y
    return h


for _k, _op in {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max",
                "ReduceMin": "min", "ReduceProd": "prod", "ReduceSumSquare": "sum_square",
                "ReduceL2": "l2"}.items():
    HANDLERS[_k] = _reduce(_op)
