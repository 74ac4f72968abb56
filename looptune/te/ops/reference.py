"""Numpy references for every operator: the ground truth kernels are checked against.
They accumulate in float64 and return the dtype the te operator produces; arguments mirror
the te operators' (arrays in place of tensors)."""
from __future__ import annotations

import math

import numpy as np

try:
    from scipy.special import erf as _erf
except ImportError:  # scipy is optional; math.erf is exact but slow elementwise
    _erf = np.vectorize(math.erf, otypes=[np.float64])


def _f64(*xs):
    return [np.asarray(x, dtype=np.float64) for x in xs]


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


# ------------------------------------------------------------------------------ linalg
def matmul(a, b, transpose_a=False, transpose_b=False):
    dtype = np.result_type(a, b)
    a, b = _f64(a, b)
    return ((a.T if transpose_a else a) @ (b.T if transpose_b else b)).astype(dtype)


def matmul_add(a, b, c):
    return (_f64(a)[0] @ _f64(b)[0] + c).astype(np.result_type(a, b, c))


def batch_matmul(a, b):
    return np.matmul(*_f64(a, b)).astype(np.result_type(a, b))


def dense(x, w, bias=None, relu=False):
    out = _f64(x)[0] @ _f64(w)[0]
    if bias is not None:
        out = out + bias
    return (np.maximum(out, 0) if relu else out).astype(np.result_type(x, w))


# ------------------------------------------------------------------------------ nn
def _windows(xp, kh, kw, stride, dilation, oh, ow):
    """Yield (r, s, view) with view[..., y, x] = xp[..., y*sh + r*dh, x*sw + s*dw]."""
    (sh, sw), (dh, dw) = stride, dilation
    for r in range(kh):
        for s in range(kw):
            y0, x0 = r * dh, s * dw
            yield r, s, xp[..., y0:y0 + sh * (oh - 1) + 1:sh, x0:x0 + sw * (ow - 1) + 1:sw]


def _out(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _pad_hw(x, ph, pw, value=0.0):
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def conv2d_nchw(x, w, stride=1, padding=0, dilation=1):
    (st, pd, dl), dtype = (_pair(stride), _pair(padding), _pair(dilation)), np.result_type(x, w)
    x, w = _f64(x, w)
    K, C, R, S = w.shape
    oh, ow = _out(x.shape[2], R, st[0], pd[0], dl[0]), _out(x.shape[3], S, st[1], pd[1], dl[1])
    out = np.zeros((x.shape[0], K, oh, ow))
    for r, s, view in _windows(_pad_hw(x, *pd), R, S, st, dl, oh, ow):
        out += np.einsum("nchw,kc->nkhw", view, w[:, :, r, s])
    return out.astype(dtype)


def conv2d_nhwc(x, w, stride=1, padding=0, dilation=1):
    """Via the NCHW reference: X to NCHW, W (R, S, C, K) to (K, C, R, S), the result back."""
    out = conv2d_nchw(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), stride, padding, dilation)
    return np.ascontiguousarray(out.transpose(0, 2, 3, 1))


def depthwise_conv2d_nchw(x, w, stride=1, padding=0, dilation=1):
    (st, pd, dl), dtype = (_pair(stride), _pair(padding), _pair(dilation)), np.result_type(x, w)
    x, w = _f64(x, w)
    C, M, R, S = w.shape
    N = x.shape[0]
    oh, ow = _out(x.shape[2], R, st[0], pd[0], dl[0]), _out(x.shape[3], S, st[1], pd[1], dl[1])
    out = np.zeros((N, C, M, oh, ow))
    for r, s, view in _windows(_pad_hw(x, *pd), R, S, st, dl, oh, ow):
        out += view[:, :, None] * w[None, :, :, r, s, None, None]
    return out.reshape(N, C * M, oh, ow).astype(dtype)


def _pool(x, kernel, stride, padding, value, combine):
    (kh, kw) = _pair(kernel)
    st, (ph, pw) = _pair(kernel if stride is None else stride), _pair(padding)
    oh, ow = _out(x.shape[2], kh, st[0], ph, 1), _out(x.shape[3], kw, st[1], pw, 1)
    views = [v for _, _, v in _windows(_pad_hw(x, ph, pw, value), kh, kw, st, (1, 1), oh, ow)]
    return combine(np.stack(views)), kh * kw


def max_pool2d(x, kernel, stride=None, padding=0, ceil_mode=False):
    if ceil_mode:
        return _pool_windows(x, kernel, stride, padding, ceil_mode, "max")
    out, _ = _pool(_f64(x)[0], kernel, stride, padding, -np.inf, lambda v: v.max(axis=0))
    return out.astype(x.dtype)


def avg_pool2d(x, kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """count_include_pad=True without ceil_mode: the divisor is always kh * kw."""
    if ceil_mode or not count_include_pad:
        return _pool_windows(x, kernel, stride, padding, ceil_mode, "avg", count_include_pad)
    out, n = _pool(_f64(x)[0], kernel, stride, padding, 0.0, lambda v: v.sum(axis=0))
    return (out / n).astype(x.dtype)


def pool_out(size, k, s, p, ceil_mode):
    """PyTorch's pooling output size: with ceil_mode a last window that would start in the
    right padding is dropped."""
    out = (-(-(size + 2 * p - k) // s) if ceil_mode else (size + 2 * p - k) // s) + 1
    return out - 1 if ceil_mode and (out - 1) * s >= size + p else out


def _pool_windows(x, kernel, stride, padding, ceil_mode, kind, count_include_pad=True):
    """Pooling one window at a time, as PyTorch's kernels: a window is clipped to the padded
    input (its overhang past the right padding never counts) and, for the maximum and for an
    average without count_include_pad, to the input."""
    (kh, kw), (ph, pw) = _pair(kernel), _pair(padding)
    sh, sw = _pair(kernel if stride is None else stride)
    H, W = x.shape[2:]
    oh, ow = pool_out(H, kh, sh, ph, ceil_mode), pool_out(W, kw, sw, pw, ceil_mode)
    x64 = _f64(x)[0]
    out = np.empty(x.shape[:2] + (oh, ow))
    for i in range(oh):
        h0 = i * sh - ph
        h1 = min(h0 + kh, H + ph)
        a0, a1 = max(h0, 0), min(h1, H)
        for j in range(ow):
            w0 = j * sw - pw
            w1 = min(w0 + kw, W + pw)
            b0, b1 = max(w0, 0), min(w1, W)
            win = x64[:, :, a0:a1, b0:b1]
            if kind == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                n = (h1 - h0) * (w1 - w0) if count_include_pad else (a1 - a0) * (b1 - b0)
                out[:, :, i, j] = win.sum(axis=(2, 3)) / n
    return out.astype(x.dtype)


# ------------------------------------------------------------------------------ norm
def softmax(x, axis=-1):
    x64 = _f64(x)[0]
    e = np.exp(x64 - x64.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def layer_norm(x, gamma=None, beta=None, eps=1e-5):
    x64 = _f64(x)[0]
    mean = x64.mean(axis=-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (x64 - mean) / np.sqrt(var + eps)
    if gamma is not None:
        y = y * gamma
    if beta is not None:
        y = y + beta
    return y.astype(x.dtype)


# ------------------------------------------------------------------------------ elementwise
def relu(x):
    return np.maximum(x, 0).astype(x.dtype)


def gelu(x):
    x64 = _f64(x)[0]
    return (0.5 * x64 * (1 + _erf(x64 / math.sqrt(2)))).astype(x.dtype)


def add(a, b):
    return (np.asarray(a) + np.asarray(b)).astype(np.result_type(a, b))


def multiply(a, b):
    return (np.asarray(a, np.float64) * b).astype(np.result_type(a, b))


# ------------------------------------------------------------------------------ reduction
def _reduce(fn, x, axis, keepdims, dtype):
    out = np.asarray(fn(x, axis=None if axis is None else axis, keepdims=keepdims))
    return out.reshape(out.shape or (1,)).astype(dtype)


def reduce_sum(x, axis=None, keepdims=False):
    return _reduce(np.sum, _f64(x)[0], _tuple(axis), keepdims, x.dtype)


def reduce_max(x, axis=None, keepdims=False):
    return _reduce(np.max, x, _tuple(axis), keepdims, x.dtype)


def reduce_min(x, axis=None, keepdims=False):
    return _reduce(np.min, x, _tuple(axis), keepdims, x.dtype)


def reduce_mean(x, axis=None, keepdims=False):
    dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float32
    return _reduce(np.mean, _f64(x)[0], _tuple(axis), keepdims, dtype)


def _tuple(axis):
    return axis if axis is None or isinstance(axis, int) else tuple(axis)
