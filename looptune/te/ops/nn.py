"""Convolutions and pooling (NCHW unless the name says otherwise). Padding is a stage of its
own (an if_then_else over the input), so schedules can inline it or keep it as a buffer."""
from __future__ import annotations

from ... import te
from ._common import check, expect_tensor, pair, shape_str, window_out


def pad(X, pad_before, pad_after=None, value=0.0, name: str = "pad"):
    """out[i] = X[i - pad_before] where that is inside X, else `value`; one pad length per dim
    (pad_after defaults to pad_before)."""
    expect_tensor("pad", "X", X)
    pad_after = pad_before if pad_after is None else pad_after
    for what, p in (("pad_before", pad_before), ("pad_after", pad_after)):
        check(isinstance(p, (tuple, list)) and len(p) == X.ndim
              and all(isinstance(v, int) and v >= 0 for v in p),
              f"pad: {what} must list {X.ndim} non-negative ints, one per dimension of "
              f"{X.name} {shape_str(X.shape)}, got {p!r}")
    shape = tuple(s + b + a for s, b, a in zip(X.shape, pad_before, pad_after))
    if isinstance(value, (int, float)) and X.dtype.startswith(("int", "uint")) \
            and float(value).is_integer():
        # an integer tensor (a quantized convolution's input) pads with integers: a float
        # value would make the whole result float
        value = te.const(int(value), X.dtype)

    def body(*idx):
        inside = []
        for i, s, b, a in zip(idx, X.shape, pad_before, pad_after):
            if b:
                inside.append(i >= b)
            if a:
                inside.append(i < s + b)
        src = X[tuple(i - b for i, b in zip(idx, pad_before))]
        return te.if_then_else(te.all(*inside), src, value) if inside else src

    return te.compute(shape, body, name=name, tag="pad")


def _pad_hw(X, ph: int, pw: int, h_axis: int, value=0.0):
    """Pad the two spatial axes starting at h_axis; no stage at all when there is no padding."""
    if ph == 0 and pw == 0:
        return X
    before = [0] * X.ndim
    before[h_axis], before[h_axis + 1] = ph, pw
    return pad(X, before, before, value)


def _conv_params(op, X, W, stride, padding, dilation, xl, wl):
    expect_tensor(op, "X", X, xl)
    expect_tensor(op, "W", W, wl)
    return pair(op, "stride", stride, 1), pair(op, "padding", padding, 0), \
        pair(op, "dilation", dilation, 1)


def conv2d_nchw(X, W, stride=1, padding=0, dilation=1, name: str = "conv2d_nchw"):
    """out[n, k, y, x] = sum_{c, r, s} Xpad[n, c, y*sh + r*dh, x*sw + s*dw] * W[k, c, r, s]."""
    (sh, sw), (ph, pw), (dh, dw) = _conv_params(name, X, W, stride, padding, dilation,
                                                "NCHW", "KCRS")
    N, C, H, Wd = X.shape
    K, Cw, R, S = W.shape
    check(C == Cw, f"{name}: X is {shape_str(X.shape)} (N, C, H, W) and W is "
                   f"{shape_str(W.shape)} (K, C, R, S): the input channels {C} and {Cw} must match")
    OH = window_out(name, H, R, sh, ph, dh, "height")
    OW = window_out(name, Wd, S, sw, pw, dw, "width")
    P = _pad_hw(X, ph, pw, 2)
    rc, rr, rs = te.reduce_axis(C, "rc"), te.reduce_axis(R, "rr"), te.reduce_axis(S, "rs")
    return te.compute(
        (N, K, OH, OW),
        lambda n, k, y, x: te.sum(P[n, rc, y * sh + rr * dh, x * sw + rs * dw] * W[k, rc, rr, rs],
                                  axis=[rc, rr, rs]),
        name=name, tag="conv2d_nchw")


def conv2d_nhwc(X, W, stride=1, padding=0, dilation=1, name: str = "conv2d_nhwc"):
    """out[n, y, x, k] = sum_{r, s, c} Xpad[n, y*sh + r*dh, x*sw + s*dw, c] * W[r, s, c, k]."""
    (sh, sw), (ph, pw), (dh, dw) = _conv_params(name, X, W, stride, padding, dilation,
                                                "NHWC", "RSCK")
    N, H, Wd, C = X.shape
    R, S, Cw, K = W.shape
    check(C == Cw, f"{name}: X is {shape_str(X.shape)} (N, H, W, C) and W is "
                   f"{shape_str(W.shape)} (R, S, C, K): the input channels {C} and {Cw} must match")
    OH = window_out(name, H, R, sh, ph, dh, "height")
    OW = window_out(name, Wd, S, sw, pw, dw, "width")
    P = _pad_hw(X, ph, pw, 1)
    rr, rs, rc = te.reduce_axis(R, "rr"), te.reduce_axis(S, "rs"), te.reduce_axis(C, "rc")
    return te.compute(
        (N, OH, OW, K),
        lambda n, y, x, k: te.sum(P[n, y * sh + rr * dh, x * sw + rs * dw, rc] * W[rr, rs, rc, k],
                                  axis=[rr, rs, rc]),
        name=name, tag="conv2d_nhwc")


def depthwise_conv2d_nchw(X, W, stride=1, padding=0, dilation=1,
                          name: str = "depthwise_conv2d_nchw"):
    """Each input channel c convolved with its own M filters W[c, 0..M-1] (M = channel
    multiplier): out[n, c*M + q, y, x] = sum_{r, s} Xpad[n, c, y*sh + r*dh, x*sw + s*dw] * W[c, q, r, s]."""
    (sh, sw), (ph, pw), (dh, dw) = _conv_params(name, X, W, stride, padding, dilation,
                                                "NCHW", "CMRS")
    N, C, H, Wd = X.shape
    Cw, M, R, S = W.shape
    check(C == Cw, f"{name}: X is {shape_str(X.shape)} (N, C, H, W) and W is "
                   f"{shape_str(W.shape)} (C, M, R, S): W needs one filter group per input "
                   f"channel, so {Cw} must equal {C}")
    OH = window_out(name, H, R, sh, ph, dh, "height")
    OW = window_out(name, Wd, S, sw, pw, dw, "width")
    P = _pad_hw(X, ph, pw, 2)
    rr, rs = te.reduce_axis(R, "rr"), te.reduce_axis(S, "rs")
    return te.compute(
        (N, C * M, OH, OW),
        lambda n, c, y, x: te.sum(P[n, c // M, y * sh + rr * dh, x * sw + rs * dw]
                                  * W[c // M, c % M, rr, rs], axis=[rr, rs]),
        name=name, tag="depthwise_conv2d_nchw")


def pool_out(op: str, size: int, kernel: int, stride: int, pad: int, ceil_mode: bool,
             what: str) -> tuple[int, int]:
    """(output extent, overhang): PyTorch's and ONNX's rule, floor((size + 2 pad - kernel) /
    stride) + 1, rounded up instead with ceil_mode, where a last window that would start in
    the right padding is dropped. The overhang is how far the last window reaches past the
    right padding (0 without ceil_mode)."""
    out = window_out(op, size, kernel, stride, pad, 1, what)
    if ceil_mode:
        out = -(-(size + 2 * pad - kernel) // stride) + 1
        if (out - 1) * stride >= size + pad:
            out -= 1
    return out, max(0, (out - 1) * stride + kernel - size - 2 * pad)


def pool_count(y, size: int, kernel: int, stride: int, pad: int, out: int,
               count_include_pad: bool):
    """How many elements average_pool divides output position y's window by (PyTorch's rule):
    the window clipped to the padded input (the overhang of ceil_mode never counts) and, without
    count_include_pad, to the input itself. An int where it is the same for every position."""
    def count(start, end, lo, hi, mn, mx):
        end = mn(end, hi)
        if not count_include_pad:
            start, end = mx(start, lo), mn(end, lo + size)
        return end - start

    counts = {count(i * stride - pad, i * stride - pad + kernel, 0, size + pad, min, max)
              for i in range(out)}
    if len(counts) == 1:
        return counts.pop()
    start = y * stride - pad
    return count(start, start + kernel, 0, size + pad, te.min, te.max)


def _pool_params(op, X, kernel, stride, padding, ceil_mode=False, h_axis=2):
    expect_tensor(op, "X", X, "NCHW" if h_axis == 2 else "NHWC")
    (kh, kw) = pair(op, "kernel", kernel, 1)
    (sh, sw) = pair(op, "stride", kernel if stride is None else stride, 1)
    (ph, pw) = pair(op, "padding", padding, 0)
    check(ph <= kh // 2 and pw <= kw // 2,
          f"{op}: padding {(ph, pw)} must be at most half the kernel {(kh, kw)} (as in "
          "PyTorch), so that every window overlaps the input")
    OH, eh = pool_out(op, X.shape[h_axis], kh, sh, ph, ceil_mode, "height")
    OW, ew = pool_out(op, X.shape[h_axis + 1], kw, sw, pw, ceil_mode, "width")
    return (kh, kw), (sh, sw), (ph, pw), (OH, OW), (eh, ew)


def pool_pad(X, ph: int, pw: int, extra: tuple, h_axis: int, value=0.0):
    """The input padded by (ph, pw) on both sides, and `extra` more after: ceil_mode's
    overhang (which never counts: -inf for max, zero and not in the count for the average)."""
    if not (ph or pw or any(extra)):
        return X
    if not any(extra):
        return _pad_hw(X, ph, pw, h_axis, value)
    before, after = [0] * X.ndim, [0] * X.ndim
    before[h_axis], before[h_axis + 1] = ph, pw
    after[h_axis], after[h_axis + 1] = ph + extra[0], pw + extra[1]
    return pad(X, before, after, value)


def pool_average(total, X, kernel, stride, padding, out, count_include_pad: bool, h_axis: int,
                 name: str):
    """The window sums `total` divided by each window's count (pool_count)."""
    (kh, kw), (sh, sw), (ph, pw), (OH, OW) = kernel, stride, padding, out
    H, W = X.shape[h_axis], X.shape[h_axis + 1]

    def body(*i):
        ch = pool_count(i[h_axis], H, kh, sh, ph, OH, count_include_pad)
        cw = pool_count(i[h_axis + 1], W, kw, sw, pw, OW, count_include_pad)
        if isinstance(ch, int) and isinstance(cw, int):
            return total[i] * (1.0 / (ch * cw))
        return total[i] / te.astype(ch * cw, total.dtype)

    if h_axis == 2:
        return te.compute(total.shape, lambda n, c, y, x: body(n, c, y, x), name=name,
                          tag="elemwise")
    return te.compute(total.shape, lambda n, y, x, c: body(n, y, x, c), name=name,
                      tag="elemwise")


def max_pool2d(X, kernel, stride=None, padding=0, name: str = "max_pool2d",
               ceil_mode: bool = False):
    """out[n, c, y, x] = max over the kernel window; padding counts as minus infinity.
    stride defaults to the kernel size; ceil_mode as PyTorch's (pool_out)."""
    (kh, kw), (sh, sw), (ph, pw), (OH, OW), extra = _pool_params(name, X, kernel, stride,
                                                                 padding, ceil_mode)
    P = pool_pad(X, ph, pw, extra, 2, value=te.min_value(X.dtype))
    rr, rs = te.reduce_axis(kh, "rr"), te.reduce_axis(kw, "rs")
    return te.compute(
        (X.shape[0], X.shape[1], OH, OW),
        lambda n, c, y, x: te.max(P[n, c, y * sh + rr, x * sw + rs], axis=[rr, rs]),
        name=name, tag="pool_max")


def avg_pool2d(X, kernel, stride=None, padding=0, name: str = "avg_pool2d",
               ceil_mode: bool = False, count_include_pad: bool = True):
    """out = (sum over the window) / count: padding counts as zeros, and the count is kh * kw
    with PyTorch's defaults (count_include_pad=True, no ceil_mode; else pool_count). Two
    stages: the window sum, then the scaling."""
    (kh, kw), (sh, sw), (ph, pw), (OH, OW), extra = _pool_params(name, X, kernel, stride,
                                                                 padding, ceil_mode)
    P = pool_pad(X, ph, pw, extra, 2)
    rr, rs = te.reduce_axis(kh, "rr"), te.reduce_axis(kw, "rs")
    shape = (X.shape[0], X.shape[1], OH, OW)
    total = te.compute(
        shape, lambda n, c, y, x: te.sum(P[n, c, y * sh + rr, x * sw + rs], axis=[rr, rs]),
        name=name + "_sum", tag="pool_sum")
    return pool_average(total, X, (kh, kw), (sh, sw), (ph, pw), (OH, OW), count_include_pad, 2,
                        name)
