"""resize: ONNX Resize (and torch's interpolate) in nearest and (multi)linear modes.

Each output coordinate x of an axis resized from n to m maps to an input coordinate by
`coordinate_transformation_mode` (r is the axis's scale, m / n unless `scales` says):

    half_pixel          (x + 0.5) / r - 0.5
    pytorch_half_pixel  the same, but 0 when m == 1
    asymmetric          x / r
    align_corners       x * (n - 1) / (m - 1), 0 when m == 1

"nearest" rounds it by `nearest_mode` (round_prefer_floor: ceil(c - 0.5), round_prefer_ceil:
floor(c + 0.5), floor, ceil) and clamps it into the axis; "linear" clamps it into [0, n - 1]
and blends the two neighbours of every resized axis. Coordinates are computed in float64, as
the reference does, so that kernels and reference round them alike.

torch's interpolate(mode="nearest") is asymmetric + floor, "nearest-exact" is half_pixel +
round_prefer_ceil, "bilinear" is linear + pytorch_half_pixel (align_corners=False) or
align_corners.
"""
from __future__ import annotations

import numpy as np

from ... import te
from ..ir import GraphError
from .base import graph_op

COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
MODES = ("nearest", "linear")


def _axes(node, in_shape, attrs):
    """[(axis, n, m, r)] for the axes that change, after checking the attributes."""
    mode = attrs.get("mode", "nearest")
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    nearest = attrs.get("nearest_mode", "round_prefer_floor")
    for what, v, allowed in (("mode", mode, MODES), ("coordinate_transformation_mode", ctm,
                                                     COORDINATE_MODES),
                             ("nearest_mode", nearest, NEAREST_MODES)):
        if v not in allowed:
            raise GraphError(f"node {node} (resize): {what} must be one of {allowed}, got {v!r}")
    sizes = tuple(int(s) for s in attrs.get("sizes", ()))
    if len(sizes) != len(in_shape) or any(s < 1 for s in sizes):
        raise GraphError(f"node {node} (resize): sizes must give all {len(in_shape)} output "
                         f"dims (positive), got {sizes}")
    scales = attrs.get("scales")
    if scales is not None and (len(scales) != len(in_shape) or any(s <= 0 for s in scales)):
        raise GraphError(f"node {node} (resize): scales must give {len(in_shape)} positive "
                         f"values, got {scales}")
    out = []
    for d, (n, m) in enumerate(zip(in_shape, sizes)):
        r = float(scales[d]) if scales is not None else m / n
        if n != m or r != 1.0:
            out.append((d, n, m, r))
    return sizes, mode, ctm, nearest, out


def _source(x, n: int, m: int, r: float, ctm: str):
    """The input coordinate of output coordinate x (a float64 te expression or array)."""
    if ctm == "asymmetric":
        return x / r
    if ctm == "align_corners":
        return x * ((n - 1) / (m - 1)) if m > 1 else x * 0.0
    if ctm == "pytorch_half_pixel" and m == 1:
        return x * 0.0
    return (x + 0.5) / r - 0.5


def _round(c, nearest: str, floor, ceil):
    if nearest == "round_prefer_floor":
        return ceil(c - 0.5)
    if nearest == "round_prefer_ceil":
        return floor(c + 0.5)
    return floor(c) if nearest == "floor" else ceil(c)


def _resize_ref(a, attrs):
    x = a[0]
    _, mode, ctm, nearest, axes = _axes("", x.shape, attrs)
    out = x.astype(np.float64)
    for d, n, m, r in axes:
        c = _source(np.arange(m, dtype=np.float64), n, m, r, ctm)
        if mode == "nearest":
            idx = np.clip(_round(c, nearest, np.floor, np.ceil), 0, n - 1).astype(np.int64)
            out = np.take(out, idx, axis=d)
        else:
            c = np.clip(c, 0, n - 1)
            lo = np.floor(c).astype(np.int64)
            hi = np.minimum(lo + 1, n - 1)
            w = (c - lo).reshape((-1,) + (1,) * (x.ndim - 1 - d))
            out = np.take(out, lo, axis=d) * (1 - w) + np.take(out, hi, axis=d) * w
    return out.astype(x.dtype)


@graph_op("resize", "injective",
          attrs=("mode", "sizes", "scales", "coordinate_transformation_mode", "nearest_mode"),
          ref=_resize_ref)
def resize(inputs, attrs, node):
    """The input resized to `sizes` (every output dim; the axes that keep their size are
    copied). Defaults as ONNX's: nearest, half_pixel, round_prefer_floor."""
    if len(inputs) != 1:
        raise GraphError(f"node {node} (resize): takes 1 input, got {len(inputs)}")
    X = inputs[0]
    if not X.dtype.startswith("float"):
        raise GraphError(f"node {node} (resize): needs a float tensor, got {X.dtype}")
    sizes, mode, ctm, nearest, axes = _axes(node, X.shape, attrs)

    def coord(i, n, m, r):
        return _source(te.astype(i, "float64"), n, m, r, ctm)

    def nearest_body(*i):
        idx = list(i)
        for d, n, m, r in axes:
            c = _round(coord(i[d], n, m, r), nearest, te.floor, te.ceil)
            idx[d] = te.max(te.min(te.astype(c, "int32"), n - 1), 0)
        return X[tuple(idx)]

    def linear_body(*i):
        corners = [(tuple(i), None)]  # (index, weight) of every corner of the cell
        for d, n, m, r in axes:
            c = te.max(te.min(coord(i[d], n, m, r), float(n - 1)), 0.0)
            f = te.floor(c)
            lo = te.astype(f, "int32")
            hi = te.min(lo + 1, n - 1)
            w = te.astype(c - f, X.dtype)
            nxt = []
            for idx, wt in corners:
                for pos, pw in ((lo, 1.0 - w), (hi, w)):
                    nxt.append((idx[:d] + (pos,) + idx[d + 1:], pw if wt is None else wt * pw))
            corners = nxt
        if not axes:
            return X[tuple(i)]
        total = None
        for idx, wt in corners:
            term = X[idx] * wt
            total = term if total is None else total + term
        return total

    body = nearest_body if mode == "nearest" else linear_body
    return te.compute(sizes, body, name=node, tag="injective")
