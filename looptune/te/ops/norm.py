"""Normalizations: softmax and layer norm, each a few stages (row statistics first, then an
elementwise stage that uses them) because a reduction must be the outermost expression."""
from __future__ import annotations

import numpy as np

from ... import te
from ._common import check, expect_tensor, norm_axis, shape_str


def _stat_shape(shape: tuple, axis: int) -> tuple:
    """The shape of a per-row statistic: `axis` removed (kept as 1 for a 1-D input, since
    the IR has no 0-d buffers)."""
    return shape[:axis] + shape[axis + 1:] or (1,)


def _stat_index(idx: tuple, axis: int, ndim: int) -> tuple:
    """The index of the statistic for output element `idx`."""
    return idx[:axis] + idx[axis + 1:] if ndim > 1 else (0,)


def _row(idx: tuple, axis: int, ndim: int, k) -> tuple:
    """The input index of element k along `axis`, given a statistic's index `idx`."""
    return idx[:axis] + (k,) + idx[axis:] if ndim > 1 else (k,)


def _max_expsum(X, axis, name: str):
    """(axis, ndim, max, sum of exp(x - max)) along `axis`: softmax's first two stages."""
    expect_tensor(name, "X", X)
    a, nd = norm_axis(name, X, axis), X.ndim
    stat = _stat_shape(X.shape, a)
    k1 = te.reduce_axis(X.shape[a], "k")
    mx = te.compute(stat, lambda *i: te.max(X[_row(i, a, nd, k1)], axis=k1),
                    name=name + "_max", tag="softmax_max")
    k2 = te.reduce_axis(X.shape[a], "k")
    ex = te.compute(stat, lambda *i: te.sum(te.exp(X[_row(i, a, nd, k2)] - mx[i]), axis=k2),
                    name=name + "_expsum", tag="softmax_expsum")
    return a, nd, mx, ex


def softmax(X, axis: int = -1, name: str = "softmax"):
    """out = exp(x - max) / sum(exp(x - max)) along `axis`, in three stages: the max, the sum of
    exponentials, the division (which recomputes exp rather than storing it)."""
    a, nd, mx, ex = _max_expsum(X, axis, name)

    def norm(*i):
        s = _stat_index(i, a, nd)
        return te.exp(X[i] - mx[s]) / ex[s]

    return te.compute(X.shape, norm, name=name, tag="softmax_norm")


def log_softmax(X, axis: int = -1, name: str = "log_softmax"):
    """out = x - max - log(sum(exp(x - max))) along `axis`: the max, the sum of exponentials,
    then the subtraction."""
    a, nd, mx, ex = _max_expsum(X, axis, name)

    def norm(*i):
        s = _stat_index(i, a, nd)
        return X[i] - mx[s] - te.log(ex[s])

    return te.compute(X.shape, norm, name=name, tag="log_softmax_norm")


def _trailing(op: str, X, k: int, params: dict) -> tuple:
    """Checks for a normalization over the last k axes; each of `params` (gamma, beta: None
    or tensors) must have those axes' shape. Returns the statistics' shape (the leading
    axes, or (1,))."""
    check(isinstance(k, int) and 1 <= k <= X.ndim,
          f"{op}: axes_count must be 1 to {X.ndim} for {X.name} {shape_str(X.shape)}, got {k!r}")
    norm_shape = X.shape[X.ndim - k:]
    for arg, t in params.items():
        if t is not None:
            expect_tensor(op, arg, t)
            check(t.shape == norm_shape, f"{op}: {arg} is {shape_str(t.shape)} but must be "
                                         f"{shape_str(norm_shape)}, the normalized axes of "
                                         f"{X.name} {shape_str(X.shape)}")
    return X.shape[:X.ndim - k] or (1,)


def _row_k(i: tuple, ks: list, ndim: int) -> tuple:
    """The input index of a statistic's index i and the reduction variables ks."""
    return (tuple(i) if ndim > len(ks) else ()) + tuple(ks)


def rms_norm(X, gamma=None, eps: float = 1e-6, name: str = "rms_norm"):
    """out = x / sqrt(mean(x^2) + eps) * gamma over the last axis (T5's and Llama's RMSNorm).
    Stages: the mean square, then the scaling."""
    expect_tensor(name, "X", X)
    nd = X.ndim
    stat = _trailing(name, X, 1, {"gamma": gamma})
    D = X.shape[-1]
    inv = 1.0 / D
    k = te.reduce_axis(D, "k")

    def ms_body(*i):
        v = X[_row_k(i, [k], nd)]
        return te.sum(v * v * inv, axis=k)

    ms = te.compute(stat, ms_body, name=name + "_ms", tag="rms_norm_ms")

    def norm(*i):
        y = X[i] * te.rsqrt(ms[i[:-1] if nd > 1 else (0,)] + eps)
        return y * gamma[i[-1]] if gamma is not None else y

    return te.compute(X.shape, norm, name=name, tag="rms_norm")


def _layer_norm_axes(X, gamma, beta, k: int, eps: float, name: str):
    """layer_norm over the last k axes (torch's normalized_shape of k dims)."""
    nd = X.ndim
    stat = _trailing(name, X, k, {"gamma": gamma, "beta": beta})
    norm_shape = X.shape[nd - k:]
    inv = 1.0 / int(np.prod(norm_shape))
    k1 = [te.reduce_axis(s, f"k{d}") for d, s in enumerate(norm_shape)]
    mean = te.compute(stat, lambda *i: te.sum(X[_row_k(i, k1, nd)] * inv, axis=k1),
                      name=name + "_mean", tag="layer_norm_mean")
    k2 = [te.reduce_axis(s, f"k{d}") for d, s in enumerate(norm_shape)]

    def var_body(*i):
        d = X[_row_k(i, k2, nd)] - mean[i]
        return te.sum(d * d * inv, axis=k2)

    var = te.compute(stat, var_body, name=name + "_var", tag="layer_norm_var")

    def norm(*i):
        s = tuple(i[:nd - k]) or (0,)
        y = (X[i] - mean[s]) * te.rsqrt(var[s] + eps)
        if gamma is not None:
            y = y * gamma[i[nd - k:]]
        if beta is not None:
            y = y + beta[i[nd - k:]]
        return y

    return te.compute(X.shape, norm, name=name, tag="layer_norm")


def layer_norm(X, gamma=None, beta=None, axis: int = -1, eps: float = 1e-5,
               name: str = "layer_norm", axes_count: int = 1):
    """out = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis, or the last
    `axes_count` axes (population variance, as PyTorch). Stages: mean, variance (two-pass,
    for accuracy), normalize."""
    expect_tensor(name, "X", X)
    if axes_count != 1:
        check(axis in (-1, X.ndim - 1), f"{name}: with axes_count={axes_count} the axes are "
                                        f"the last ones; axis must be -1, got {axis}")
        return _layer_norm_axes(X, gamma, beta, axes_count, eps, name)
    a, nd = norm_axis(name, X, axis), X.ndim
    check(a == nd - 1, f"{name}: only the last axis is supported (axis={axis} of "
                       f"{X.name} {shape_str(X.shape)}); transpose the input first")
    D = X.shape[a]
    for arg, t in (("gamma", gamma), ("beta", beta)):
        if t is not None:
            expect_tensor(name, arg, t)
            check(t.shape == (D,), f"{name}: {arg} is {shape_str(t.shape)} but must be ({D},), "
                                   f"one value per element of the normalized axis of "
                                   f"{X.name} {shape_str(X.shape)}")
    stat = _stat_shape(X.shape, a)
    inv = 1.0 / D
    k1 = te.reduce_axis(D, "k")
    mean = te.compute(stat, lambda *i: te.sum(X[_row(i, a, nd, k1)] * inv, axis=k1),
                      name=name + "_mean", tag="layer_norm_mean")
    k2 = te.reduce_axis(D, "k")

    def var_body(*i):
        d = X[_row(i, a, nd, k2)] - mean[i]
        return te.sum(d * d * inv, axis=k2)

    var = te.compute(stat, var_body, name=name + "_var", tag="layer_norm_var")

    def norm(*i):
        s = _stat_index(i, a, nd)
        y = (X[i] - mean[s]) * te.rsqrt(var[s] + eps)
        if gamma is not None:
            y = y * gamma[i[a]]
        if beta is not None:
            y = y + beta[i[a]]
        return y

    return te.compute(X.shape, norm, name=name, tag="layer_norm")
