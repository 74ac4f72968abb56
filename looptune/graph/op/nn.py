"""Graph operators that anchor a kernel (matmul, convolution, pooling) or reduce (softmax,
layer_norm, mean). Their tensor expressions come from `looptune.te.ops`; their numpy
references from `looptune.te.ops.reference`."""
from __future__ import annotations

import numpy as np

from ... import te
from ...te import ops
from ...te.ops import reference as R
from ..ir import GraphError
from .base import graph_op


def _n_inputs(node, op, inputs, lo, hi=None):
    hi = lo if hi is None else hi
    if not lo <= len(inputs) <= hi:
        want = str(lo) if lo == hi else f"{lo} to {hi}"
        raise GraphError(f"node {node} ({op}): takes {want} inputs, got {len(inputs)}")


# ------------------------------------------------------------------ linear algebra
# operands of these types are multiplied and summed in another (what the hardware's dot
# product units do): bfloat16 in float32, 8-bit integers in int32
ACCUMULATE = {"bfloat16": "float32", "uint8": "int32", "int8": "int32"}


def _matmul_ref(a, attrs):
    x, w = a
    x = x.T if attrs.get("transpose_a") else x
    w = w.T if attrs.get("transpose_b") else w
    out = ACCUMULATE.get(str(a[0].dtype), a[0].dtype)
    return (x.astype(np.float64) @ w.astype(np.float64)).astype(out)


@graph_op("matmul", "anchor", attrs=("transpose_a", "transpose_b"), ref=_matmul_ref)
def matmul(inputs, attrs, node):
    """2-D matrix product; transpose_b=True reads B as (N, K), like a linear layer's weight.
    bfloat16 operands are multiplied and summed in float32 (a float32 result), 8-bit ones in
    int32."""
    _n_inputs(node, "matmul", inputs, 2)
    return ops.matmul(inputs[0], inputs[1], transpose_a=bool(attrs.get("transpose_a", False)),
                      transpose_b=bool(attrs.get("transpose_b", False)), name=node,
                      out_dtype=ACCUMULATE.get(inputs[0].dtype))


def _bmm_ref(a, attrs):
    x, y = a
    if attrs.get("transpose_b"):
        y = np.swapaxes(y, 1, 2)
    return np.matmul(x.astype(np.float64), y).astype(a[0].dtype)


@graph_op("batch_matmul", "anchor", attrs=("transpose_b",), ref=_bmm_ref)
def batch_matmul(inputs, attrs, node):
    """(B, M, K) @ (B, K, N), or (B, N, K) with transpose_b=True; a batch of 1 broadcasts."""
    _n_inputs(node, "batch_matmul", inputs, 2)
    A, B = inputs
    if not attrs.get("transpose_b"):
        return ops.batch_matmul(A, B, name=node)
    if A.ndim != 3 or B.ndim != 3 or A.shape[2] != B.shape[2]:
        raise GraphError(f"node {node} (batch_matmul): with transpose_b A must be (B, M, K) and "
                         f"B (B, N, K), got {A.shape} and {B.shape}")
    (ba, M, K), (bb, N, _) = A.shape, B.shape
    k = te.reduce_axis(K, "k")
    return te.compute((max(ba, bb), M, N),
                      lambda b, i, j: te.sum(A[b if ba > 1 else 0, i, k]
                                             * B[b if bb > 1 else 0, j, k], axis=k),
                      name=node, tag="batch_matmul")


# ------------------------------------------------------------------ convolution
def _conv_attrs(attrs):
    return (attrs.get("stride", 1), attrs.get("padding", 0), attrs.get("dilation", 1),
            int(attrs.get("groups", 1)))


def _pad_value(attrs, X, node):
    """conv2d's `pad_value`: what the padding holds (0 unless said), an integer for 8-bit
    inputs only: a quantized input padded with its zero point (graph.quantized)."""
    value = attrs.get("pad_value", 0)
    if value and X.dtype not in ("uint8", "int8"):
        raise GraphError(f"node {node} (conv2d): pad_value is for 8-bit inputs (a quantized "
                         f"convolution's zero point), got it with {X.dtype}")
    if value:
        info = np.iinfo(X.dtype)
        if not (float(value).is_integer() and info.min <= value <= info.max):
            raise GraphError(f"node {node} (conv2d): pad_value {value!r} is not a {X.dtype} value")
    return int(value)


# conv2d's `layout`: the input's and the output's. "NHWC" keeps activations channels-last
# from one convolution to the next (graph.layout.channels_last); "NCHW-NHWC" starts there.
CONV_LAYOUTS = ("NCHW", "NHWC", "NCHW-NHWC")
TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
# conv2d's `weight_layout`s, each as the permutation that makes it (K, C/groups, R, S); the
# channels-last ones: CRSK (output channels contiguous: a float kernel vectorizes over them)
# and RSKC (input channels contiguous: an int8 unit's groups of 4 along the reduction)
TO_KCRS = {"KCRS": (0, 1, 2, 3), "CRSK": (3, 0, 1, 2), "RSKC": (2, 3, 0, 1)}
CHANNELS_LAST_WEIGHTS = ("CRSK", "RSKC")


def _conv_ref(a, attrs):
    layout = attrs.get("layout", "NCHW")
    x, w = a
    if layout == "NHWC":
        x = np.transpose(x, TO_NCHW)
    out = _conv_ref_nchw(x, w, attrs)
    return out if layout == "NCHW" else np.ascontiguousarray(np.transpose(out, TO_NHWC))


def _conv_ref_nchw(x, w, attrs):
    w = np.ascontiguousarray(np.transpose(w, TO_KCRS[attrs.get("weight_layout", "KCRS")]))
    stride, padding, dilation, groups = _conv_attrs(attrs)
    if str(x.dtype) in ACCUMULATE:  # 8-bit operands, an int32 sum; padded with pad_value
        ph, pw = (padding, padding) if isinstance(padding, int) else padding
        x = np.pad(x.astype(np.int32), ((0, 0), (0, 0), (ph, ph), (pw, pw)),
                   constant_values=int(attrs.get("pad_value", 0)))
        w, padding = w.astype(np.int32), 0
    if groups == 1:
        return R.conv2d_nchw(x, w, stride, padding, dilation)
    C, K = x.shape[1], w.shape[0]
    cg, kg = C // groups, K // groups
    return np.concatenate([R.conv2d_nchw(x[:, g * cg:(g + 1) * cg], w[g * kg:(g + 1) * kg],
                                         stride, padding, dilation) for g in range(groups)],
                          axis=1)


@graph_op("conv2d", "anchor",
          attrs=("stride", "padding", "dilation", "groups", "weight_layout", "layout",
                 "pad_value"),
          ref=_conv_ref)
def conv2d(inputs, attrs, node):
    """NCHW input, (K, C/groups, R, S) weight, as PyTorch; groups == C is depthwise.

    weight_layout="CRSK" takes the weight as (C/groups, R, S, K) and computes the output
    channels-last, (N, H, W, K), then writes it back as NCHW: output channels are contiguous
    in the weight and in the accumulators, so a kernel can vectorize over them where the
    image is too narrow (7x7, 14x14) or strided to vectorize over its columns. prepare()
    chooses it for such convolutions with constant weights.

    layout="NHWC" (CRSK weights only) takes and gives (N, H, W, C) activations, and
    "NCHW-NHWC" takes NCHW and gives NHWC: graph.layout.channels_last keeps a network's
    activations channels-last between convolutions, so no kernel transposes them."""
    _n_inputs(node, "conv2d", inputs, 2)
    X, W = inputs
    stride, padding, dilation, groups = _conv_attrs(attrs)
    layout = attrs.get("weight_layout", "KCRS")
    data_layout = attrs.get("layout", "NCHW")
    if layout not in TO_KCRS:
        raise GraphError(f"node {node} (conv2d): weight_layout must be one of "
                         f"{', '.join(TO_KCRS)}, got {layout!r}")
    if data_layout not in CONV_LAYOUTS or (data_layout != "NCHW"
                                           and layout not in CHANNELS_LAST_WEIGHTS):
        raise GraphError(f"node {node} (conv2d): layout must be one of {CONV_LAYOUTS}, and "
                         f"anything but NCHW needs weight_layout CRSK or RSKC; got "
                         f"{data_layout!r} with {layout}")
    pad_value = _pad_value(attrs, X, node)
    if layout in CHANNELS_LAST_WEIGHTS:
        return _conv_channels_last(X, W, stride, padding, dilation, groups, node, data_layout,
                                   pad_value, layout)
    if X.ndim != 4 or W.ndim != 4:
        raise GraphError(f"node {node} (conv2d): needs a 4-D input (N, C, H, W) and weight "
                         f"(K, C/groups, R, S), got {X.shape} and {W.shape}")
    C, K = X.shape[1], W.shape[0]
    if groups < 1 or C % groups or K % groups or W.shape[1] * groups != C:
        raise GraphError(f"node {node} (conv2d): groups={groups} does not fit {C} input and {K} "
                         f"output channels with a weight of shape {W.shape} (it needs "
                         f"C/groups = {W.shape[1]} input channels per filter)")
    out = ACCUMULATE.get(X.dtype)
    if groups == 1 and out is None:
        return ops.conv2d_nchw(X, W, stride, padding, dilation, name=node)
    from ...te.ops._common import pair, window_out
    (sh, sw), (ph, pw), (dh, dw) = (pair(node, "stride", stride, 1),
                                    pair(node, "padding", padding, 0),
                                    pair(node, "dilation", dilation, 1))
    Rk, Sk = W.shape[2], W.shape[3]
    OH = window_out(node, X.shape[2], Rk, sh, ph, dh, "height")
    OW = window_out(node, X.shape[3], Sk, sw, pw, dw, "width")
    P = ops.pad(X, (0, 0, ph, pw), value=pad_value or 0.0, name="pad") if ph or pw else X
    cg, kg = C // groups, K // groups
    rr, rs = te.reduce_axis(Rk, "rr"), te.reduce_axis(Sk, "rs")

    def widen(v): return v if out is None else v.astype(out)
    if cg == 1:  # depthwise (channel multiplier kg)
        return te.compute(
            (X.shape[0], K, OH, OW),
            lambda n, k, y, x: te.sum(widen(P[n, k // kg, y * sh + rr * dh, x * sw + rs * dw])
                                      * widen(W[k, 0, rr, rs]), axis=[rr, rs]),
            name=node, tag="depthwise_conv2d_nchw")
    rc = te.reduce_axis(cg, "rc")
    return te.compute(
        (X.shape[0], K, OH, OW),
        lambda n, k, y, x: te.sum(
            widen(P[n, (k // kg) * cg + rc, y * sh + rr * dh, x * sw + rs * dw])
            * widen(W[k, rc, rr, rs]), axis=[rc, rr, rs]),
        name=node, tag="group_conv2d_nchw" if groups > 1 else "conv2d_nchw")


def _conv_channels_last(X, W, stride, padding, dilation, groups, node, layout, pad_value=0,
                        weight_layout="CRSK"):
    """The convolution computed channels-last from a (C/groups, R, S, K) weight (or an (R, S,
    K, C/groups) one): output channel k reads input channels (k // (K/groups)) * C/groups +
    rc, so a depthwise one (C/groups = 1) reads its own channel and vectorizes over channels
    like any other."""
    from ...te.ops._common import pair, window_out
    (sh, sw), (ph, pw), (dh, dw) = (pair(node, "stride", stride, 1),
                                    pair(node, "padding", padding, 0),
                                    pair(node, "dilation", dilation, 1))
    h = 1 if layout == "NHWC" else 2  # the input's height axis
    c = 3 if layout == "NHWC" else 1
    C = X.shape[c] if X.ndim == 4 else None
    crsk = weight_layout == "CRSK"
    cg, Rk, Sk, K = W.shape if crsk or W.ndim != 4 else (W.shape[3], *W.shape[:3])
    if X.ndim != 4 or W.ndim != 4 or groups < 1 or C % groups or K % groups \
            or cg * groups != C:
        raise GraphError(f"node {node} (conv2d): a {weight_layout} weight must be "
                         f"{'(C/groups, R, S, K)' if crsk else '(R, S, K, C/groups)'} with "
                         f"C = {C if C is not None else '?'} input channels and groups={groups} "
                         f"dividing C and K, got {W.shape}")
    kg = K // groups
    OH = window_out(node, X.shape[h], Rk, sh, ph, dh, "height")
    OW = window_out(node, X.shape[h + 1], Sk, sw, pw, dw, "width")
    rr, rs = te.reduce_axis(Rk, "rr"), te.reduce_axis(Sk, "rs")
    rc = te.reduce_axis(cg, "rc") if cg > 1 else None
    axes = [rc, rr, rs] if rc is not None else [rr, rs]

    def channel(k):  # the input channel output channel k reads
        if groups == 1:
            return 0 if rc is None else rc
        group = k if kg == 1 else k // kg
        return group if rc is None else group * cg + rc

    out = ACCUMULATE.get(X.dtype)  # 8-bit operands: widened, summed in int32

    def widen(v): return v if out is None else v.astype(out)

    def weight(k):
        c = 0 if rc is None else rc
        return widen(W[c, rr, rs, k] if crsk else W[rr, rs, k, c])

    if layout == "NHWC":
        P = ops.pad(X, (0, ph, pw, 0), value=pad_value or 0.0, name="pad") if ph or pw else X
        return te.compute(
            (X.shape[0], OH, OW, K),
            lambda n, y, x, k: te.sum(widen(P[n, y * sh + rr * dh, x * sw + rs * dw, channel(k)])
                                      * weight(k), axis=axes),
            name=node, tag="conv2d_nhwc")
    P = ops.pad(X, (0, 0, ph, pw), value=pad_value or 0.0, name="pad") if ph or pw else X
    nhwc = te.compute(
        (X.shape[0], OH, OW, K),
        lambda n, y, x, k: te.sum(widen(P[n, channel(k), y * sh + rr * dh, x * sw + rs * dw])
                                  * weight(k), axis=axes),
        name=node + "_nhwc" if layout == "NCHW" else node, tag="conv2d_nhwc")
    if layout == "NCHW-NHWC":
        return nhwc
    return te.compute((X.shape[0], K, OH, OW), lambda n, k, y, x: nhwc[n, y, x, k], name=node,
                      tag="injective")


# ------------------------------------------------------------------ pooling
def _pool_args(attrs):
    return attrs["kernel"], attrs.get("stride"), attrs.get("padding", 0)


def _pool_opts(attrs, kind) -> dict:
    """ceil_mode (both) and count_include_pad (the average): PyTorch's defaults."""
    opts = {"ceil_mode": bool(attrs.get("ceil_mode", False))}
    if kind == "avg_pool2d":
        opts["count_include_pad"] = bool(attrs.get("count_include_pad", True))
    return opts


def _pool_ref(reduce, kind):
    def ref(a, attrs):
        x = a[0]
        if attrs.get("layout", "NCHW") == "NCHW":
            return reduce(x, *_pool_args(attrs), **_pool_opts(attrs, kind))
        out = reduce(np.transpose(x, TO_NCHW), *_pool_args(attrs), **_pool_opts(attrs, kind))
        return np.ascontiguousarray(np.transpose(out, TO_NHWC))
    return ref


def _pool_nhwc(X, attrs, node, kind):
    """Pooling over the (H, W) axes of an (N, H, W, C) input."""
    from ...te.ops.nn import _pool_params, pool_average, pool_pad
    opts = _pool_opts(attrs, kind)
    if X.ndim != 4:
        raise GraphError(f"node {node} ({kind}): needs a 4-D (N, H, W, C) input, got {X.shape}")
    (kh, kw), (sh, sw), (ph, pw), (OH, OW), extra = _pool_params(
        node, X, *_pool_args(attrs), opts["ceil_mode"], h_axis=1)
    shape = (X.shape[0], OH, OW, X.shape[3])
    rr, rs = te.reduce_axis(kh, "rr"), te.reduce_axis(kw, "rs")
    if kind == "max_pool2d":
        P = pool_pad(X, ph, pw, extra, 1, value=te.min_value(X.dtype))
        return te.compute(shape, lambda n, y, x, c: te.max(P[n, y * sh + rr, x * sw + rs, c],
                                                           axis=[rr, rs]),
                          name=node, tag="pool_max")
    P = pool_pad(X, ph, pw, extra, 1)
    total = te.compute(shape, lambda n, y, x, c: te.sum(P[n, y * sh + rr, x * sw + rs, c],
                                                        axis=[rr, rs]),
                       name=node + "_sum", tag="pool_sum")
    return pool_average(total, X, (kh, kw), (sh, sw), (ph, pw), (OH, OW),
                        opts["count_include_pad"], 1, node)


def _pool_layout(attrs, node, kind) -> str:
    layout = attrs.get("layout", "NCHW")
    if layout not in ("NCHW", "NHWC"):
        raise GraphError(f"node {node} ({kind}): layout must be NCHW or NHWC, got {layout!r}")
    return layout


@graph_op("max_pool2d", "anchor", attrs=("kernel", "stride", "padding", "layout", "ceil_mode"),
          ref=_pool_ref(R.max_pool2d, "max_pool2d"))
def max_pool2d(inputs, attrs, node):
    """ceil_mode (default False) as PyTorch's: the last window may overhang the input."""
    _n_inputs(node, "max_pool2d", inputs, 1)
    if _pool_layout(attrs, node, "max_pool2d") == "NHWC":
        return _pool_nhwc(inputs[0], attrs, node, "max_pool2d")
    return ops.max_pool2d(inputs[0], *_pool_args(attrs), name=node,
                          **_pool_opts(attrs, "max_pool2d"))


@graph_op("avg_pool2d", "anchor",
          attrs=("kernel", "stride", "padding", "layout", "ceil_mode", "count_include_pad"),
          ref=_pool_ref(R.avg_pool2d, "avg_pool2d"))
def avg_pool2d(inputs, attrs, node):
    """ceil_mode (default False) and count_include_pad (default True) as PyTorch's; ONNX's
    AveragePool defaults to count_include_pad=0 and its importer says so."""
    _n_inputs(node, "avg_pool2d", inputs, 1)
    if _pool_layout(attrs, node, "avg_pool2d") == "NHWC":
        return _pool_nhwc(inputs[0], attrs, node, "avg_pool2d")
    return ops.avg_pool2d(inputs[0], *_pool_args(attrs), name=node,
                          **_pool_opts(attrs, "avg_pool2d"))


# ------------------------------------------------------------------ reductions
def _axes(attrs, ndim):
    axis = attrs.get("axis")
    if axis is None:
        return tuple(range(ndim))
    axis = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(sorted(a % ndim for a in axis))


def _reduce_op(name, te_fn, np_fn):
    def ref(a, attrs):
        x = a[0]
        out = np_fn(x.astype(np.float64), axis=_axes(attrs, x.ndim),
                    keepdims=bool(attrs.get("keepdims", False)))
        return np.asarray(out).astype(x.dtype)

    def build(inputs, attrs, node):
        _n_inputs(node, name, inputs, 1)
        X = inputs[0]
        return te_fn(X, axis=_axes(attrs, X.ndim), keepdims=bool(attrs.get("keepdims", False)),
                     name=node)

    graph_op(name, "reduction", attrs=("axis", "keepdims"), ref=ref)(build)


_reduce_op("mean", ops.reduce_mean, np.mean)
_reduce_op("sum", ops.reduce_sum, np.sum)
_reduce_op("max", ops.reduce_max, np.max)


@graph_op("softmax", "reduction", attrs=("axis",),
          ref=lambda a, at: R.softmax(a[0], at.get("axis", -1)))
def softmax(inputs, attrs, node):
    _n_inputs(node, "softmax", inputs, 1)
    return ops.softmax(inputs[0], axis=attrs.get("axis", -1), name=node)


def _layer_norm_ref(a, attrs):
    x = a[0]
    k = int(attrs.get("axes_count", 1))
    flat = x.shape[:x.ndim - k] + (-1,)  # the last k axes as one
    gamma = a[1].reshape(-1) if len(a) > 1 else None
    beta = a[2].reshape(-1) if len(a) > 2 else None
    return R.layer_norm(x.reshape(flat), gamma, beta, attrs.get("eps", 1e-5)).reshape(x.shape)


@graph_op("layer_norm", "reduction", attrs=("eps", "axes_count"), ref=_layer_norm_ref)
def layer_norm(inputs, attrs, node):
    """Over the last axis, or the last `axes_count` axes (torch's normalized_shape), with
    optional gamma and beta inputs of those axes' shape."""
    _n_inputs(node, "layer_norm", inputs, 1, 3)
    X = inputs[0]
    gamma = inputs[1] if len(inputs) > 1 else None
    beta = inputs[2] if len(inputs) > 2 else None
    return ops.layer_norm(X, gamma, beta, axis=-1, eps=float(attrs.get("eps", 1e-5)), name=node,
                          axes_count=int(attrs.get("axes_count", 1)))
