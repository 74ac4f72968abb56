"""Reductions over some or all axes, with numpy's axis / keepdims conventions."""
from __future__ import annotations

from ... import te
from ._common import check, expect_tensor, norm_axis


def _axes(op: str, X, axis) -> tuple:
    if axis is None:
        return tuple(range(X.ndim))
    axis = (axis,) if isinstance(axis, int) else tuple(axis)
    check(len(axis) > 0, f"{op}: axis=() reduces nothing; pass None to reduce every axis")
    axes = tuple(norm_axis(op, X, a) for a in axis)
    check(len(set(axes)) == len(axes), f"{op}: axis {axis} names an axis twice")
    return tuple(sorted(axes))


def _reduce(op: str, reducer, X, axis, keepdims: bool, name: str):
    """out = reducer over `axis`. A full reduction without keepdims has shape (1,), not (),
    since the IR has no 0-d buffers."""
    expect_tensor(op, "X", X)
    axes = _axes(op, X, axis)
    if keepdims:
        shape = tuple(1 if d in axes else s for d, s in enumerate(X.shape))
    else:
        shape = tuple(s for d, s in enumerate(X.shape) if d not in axes) or (1,)
    rv = {d: te.reduce_axis(X.shape[d], f"r{d}") for d in axes}

    def body(*i):
        kept = iter(i[d] for d in range(X.ndim) if d not in axes) if keepdims else iter(i)
        idx = tuple(rv[d] if d in axes else next(kept) for d in range(X.ndim))
        return reducer(X[idx], axis=list(rv.values()))

    return te.compute(shape, body, name=name, tag="reduce")


def reduce_sum(X, axis=None, keepdims: bool = False, name: str = "reduce_sum"):
    return _reduce("reduce_sum", te.sum, X, axis, keepdims, name)


def reduce_max(X, axis=None, keepdims: bool = False, name: str = "reduce_max"):
    return _reduce("reduce_max", te.max, X, axis, keepdims, name)


def reduce_min(X, axis=None, keepdims: bool = False, name: str = "reduce_min"):
    return _reduce("reduce_min", te.min, X, axis, keepdims, name)


def reduce_prod(X, axis=None, keepdims: bool = False, name: str = "reduce_prod"):
    return _reduce("reduce_prod", te.prod, X, axis, keepdims, name)


def reduce_mean(X, axis=None, keepdims: bool = False, name: str = "reduce_mean"):
    """The sum, then a stage scaling by 1/count; integer inputs give float32."""
    total = _reduce("reduce_mean", te.sum, X, axis, keepdims, name + "_sum")
    count = 1
    for d in _axes("reduce_mean", X, axis):
        count *= X.shape[d]
    to_float = not X.dtype.startswith("float")

    def body(*i):
        s = total[i].astype("float32") if to_float else total[i]
        return s * (1.0 / count)

    return te.compute(total.shape, body, name=name, tag="elemwise")
