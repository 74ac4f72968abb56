"""Normalizations: softmax and layer norm, each a few stages (row statistics first, then an
elementwise stage that uses them) because a reduction must be the outermost expression."""
from __future__ import annotations

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


def softmax(X, axis: int = -1, name: str = "softmax"):
    """out = exp(x - max) / sum(exp(x - max)) along `axis`, in three stages: the max, the sum of
    exponentials, the division (which recomputes exp rather than storing it)."""
    expect_tensor(name, "X", X)
    a, nd = norm_axis(name, X, axis), X.ndim
    stat = _stat_shape(X.shape, a)
    k1 = te.reduce_axis(X.shape[a], "k")
    mx = te.compute(stat, lambda *i: te.max(X[_row(i, a, nd, k1)], axis=k1),
                    name=name + "_max", tag="softmax_max")
    k2 = te.reduce_axis(X.shape[a], "k")
    ex = te.compute(stat, lambda *i: te.sum(te.exp(X[_row(i, a, nd, k2)] - mx[i]), axis=k2),
                    name=name + "_expsum", tag="softmax_expsum")

    def norm(*i):
        s = _stat_index(i, a, nd)
        return te.exp(X[i] - mx[s]) / ex[s]

    return te.compute(X.shape, norm, name=name, tag="softmax_norm")


def layer_norm(X, gamma=None, beta=None, axis: int = -1, eps: float = 1e-5,
               name: str = "layer_norm"):
    """out = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis (population
    variance, as PyTorch). Stages: mean, variance (two-pass, for accuracy), normalize."""
    expect_tensor(name, "X", X)
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
