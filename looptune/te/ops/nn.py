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


def _pool_params(op, X, kernel, stride, padding):
    expect_tensor(op, "X", X, "NCHW")
    (kh, kw) = pair(op, "kernel", kernel, 1)
    (sh, sw) = pair(op, "stride", kernel if stride is None else stride, 1)
    (ph, pw) = pair(op, "padding", padding, 0)
    check(ph <= kh // 2 and pw <= kw // 2,
          f"{op}: padding {(ph, pw)} must be at most half the kernel {(kh, kw)} (as in "
          "PyTorch), so that every window overlaps the input")
    OH = window_out(op, X.shape[2], kh, sh, ph, 1, "height")
    OW = window_out(op, X.shape[3], kw, sw, pw, 1, "width")
    return (kh, kw), (sh, sw), (ph, pw), (OH, OW)


def max_pool2d(X, kernel, stride=None, padding=0, name: str = "max_pool2d"):
    """out[n, c, y, x] = max over the kernel window; padding counts as minus infinity.
    stride defaults to the kernel size."""
    (kh, kw), (sh, sw), (ph, pw), (OH, OW) = _pool_params(name, X, kernel, stride, padding)
    P = _pad_hw(X, ph, pw, 2, value=te.min_value(X.dtype))
    rr, rs = te.reduce_axis(kh, "rr"), te.reduce_axis(kw, "rs")
    return te.compute(
        (X.shape[0], X.shape[1], OH, OW),
        lambda n, c, y, x: te.max(P[n, c, y * sh + rr, x * sw + rs], axis=[rr, rs]),
        name=name, tag="pool_max")


def avg_pool2d(X, kernel, stride=None, padding=0, name: str = "avg_pool2d"):
    """out = (sum over the window) / (kh * kw): padding counts as zeros and is included in the
    count (PyTorch's count_include_pad=True). Two stages: the window sum, then the scaling."""
    (kh, kw), (sh, sw), (ph, pw), (OH, OW) = _pool_params(name, X, kernel, stride, padding)
    P = _pad_hw(X, ph, pw, 2)
    rr, rs = te.reduce_axis(kh, "rr"), te.reduce_axis(kw, "rs")
    shape = (X.shape[0], X.shape[1], OH, OW)
    total = te.compute(
        shape, lambda n, c, y, x: te.sum(P[n, c, y * sh + rr, x * sw + rs], axis=[rr, rs]),
        name=name + "_sum", tag="pool_sum")
    return te.compute(shape, lambda n, c, y, x: total[n, c, y, x] * (1.0 / (kh * kw)),
                      name=name, tag="elemwise")
