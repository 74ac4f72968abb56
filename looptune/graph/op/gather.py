"""Indexing and broadcasting copies: gather (np.take), gather_elements
(np.take_along_axis), gather_nd (ONNX GatherND), expand (np.broadcast_to) and tile (np.tile).

Indices are int32 tensors. With `wrap` (the default: numpy, ONNX and torch's x[idx]) a
negative index counts from the end (idx + dim) and the valid ones are [-dim, dim); without it
(torch's index_select, gather and embedding) they are [0, dim). Any other index is an error,
as in the frameworks: the kernel checks each index it loads against the axis
(codegen/passes/check_index.py) and the call raises IndexRangeError; the numpy references
(constant folding) raise GraphError, and the importers refuse constant indices."""
from __future__ import annotations

import numpy as np

from ... import te
from ..ir import GraphError
from .base import graph_op


def _axis(node, op, axis, ndim):
    if not isinstance(axis, int) or not -ndim <= axis < ndim:
        raise GraphError(f"node {node} ({op}): axis {axis!r} is out of range for a {ndim}-D "
                         "input")
    return axis % ndim


def _index(node, op, inputs):
    if len(inputs) != 2:
        raise GraphError(f"node {node} ({op}): takes 2 inputs (data, indices), got "
                         f"{len(inputs)}")
    data, idx = inputs
    if not idx.dtype.startswith("int"):
        raise GraphError(f"node {node} ({op}): indices must be integers, got {idx.dtype}")
    return data, idx


def read_index(i, dim: int, wrap: bool):
    """The index to read from an index value: with `wrap`, a negative one counts from the end
    (spelled as check_index recognizes it, so the kernel's check allows [-dim, dim)). It is
    not clamped: the kernel checks it."""
    i = te.astype(i, "int32")
    return te.if_then_else(i < 0, i + dim, i) if wrap else i


def _wrap(attrs) -> bool:
    return bool(attrs.get("wrap", True))


def checked_indices(idx, dim: int, op: str, wrap: bool = True) -> np.ndarray:
    """int64 indices in [0, dim): with `wrap`, negative ones count from the end; GraphError
    for any outside the valid range ([-dim, dim) with wrap, else [0, dim))."""
    idx = np.asarray(idx).astype(np.int64)
    bad = idx[(idx < (-dim if wrap else 0)) | (idx >= dim)]
    if bad.size:
        raise GraphError(f"{op}: index {int(bad.flat[0])} is out of range for an axis of "
                         f"size {dim} ({bad.size} such indices)")
    return np.where(idx < 0, idx + dim, idx)


def _gather_ref(a, attrs):
    data, idx = a
    axis = attrs.get("axis", 0) % data.ndim
    return np.take(data, checked_indices(idx, data.shape[axis], "gather", _wrap(attrs)),
                   axis=axis)


@graph_op("gather", "injective", attrs=("axis", "wrap"), ref=_gather_ref)
def gather(inputs, attrs, node):
    """np.take(data, indices, axis): the output's shape is data.shape[:axis] + indices.shape
    + data.shape[axis + 1:]."""
    data, idx = _index(node, "gather", inputs)
    a = _axis(node, "gather", attrs.get("axis", 0), data.ndim)
    k = idx.ndim
    shape = data.shape[:a] + idx.shape + data.shape[a + 1:]

    def body(*i):
        row = read_index(idx[i[a:a + k]], data.shape[a], _wrap(attrs))
        return data[i[:a] + (row,) + i[a + k:]]

    return te.compute(shape, body, name=node, tag="injective")


def _gather_elements_ref(a, attrs):
    data, idx = a
    ax = attrs.get("axis", 0) % data.ndim
    idx = checked_indices(idx, data.shape[ax], "gather_elements", _wrap(attrs))
    grid = list(np.indices(idx.shape, sparse=True))
    grid[ax] = idx
    return data[tuple(grid)]


@graph_op("gather_elements", "injective", attrs=("axis", "wrap"), ref=_gather_elements_ref)
def gather_elements(inputs, attrs, node):
    """out[i] = data[i with i[axis] replaced by indices[i]] (np.take_along_axis, torch.gather,
    ONNX GatherElements): indices has data's rank and no dimension larger than data's."""
    data, idx = _index(node, "gather_elements", inputs)
    a = _axis(node, "gather_elements", attrs.get("axis", 0), data.ndim)
    if idx.ndim != data.ndim or any(s > d for k, (s, d) in enumerate(zip(idx.shape, data.shape))
                                    if k != a):
        raise GraphError(f"node {node} (gather_elements): indices {idx.shape} must have the "
                         f"rank of data {data.shape} and no larger dimension besides axis {a}")

    def body(*i):
        return data[i[:a] + (read_index(idx[i], data.shape[a], _wrap(attrs)),) + i[a + 1:]]

    return te.compute(idx.shape, body, name=node, tag="injective")


def _nd_shapes(node, data, idx, b: int):
    """ONNX GatherND's checks: (k, output shape); k = idx.shape[-1] axes of data are indexed
    after b batch axes that data and indices share."""
    k = idx[-1] if idx else 0
    if not (0 <= b < len(idx) and b <= len(data) and 1 <= k <= len(data) - b
            and tuple(data[:b]) == tuple(idx[:b])):
        raise GraphError(f"node {node} (gather_nd): indices {tuple(idx)} cannot index data "
                         f"{tuple(data)} with batch_dims={b} (ONNX GatherND: the first "
                         "batch_dims axes equal, and 1 <= indices.shape[-1] <= data rank - "
                         "batch_dims)")
    return k, tuple(idx[:-1]) + tuple(data[b + k:])


def _gather_nd_ref(a, attrs):
    data, idx = a
    b = int(attrs.get("batch_dims", 0))
    k, shape = _nd_shapes("", data.shape, idx.shape, b)
    idx = np.stack([checked_indices(idx[..., j], data.shape[b + j], "gather_nd")
                    for j in range(k)], axis=-1)
    out = np.empty(shape, data.dtype)
    for pos in np.ndindex(*idx.shape[:-1]):
        out[pos] = data[pos[:b] + tuple(idx[pos])]
    return out


@graph_op("gather_nd", "injective", attrs=("batch_dims",), ref=_gather_nd_ref)
def gather_nd(inputs, attrs, node):
    """out[p, rest] = data[p[:b], indices[p], rest] for each position p of indices.shape[:-1]
    (ONNX GatherND; negative indices count from the end)."""
    data, idx = _index(node, "gather_nd", inputs)
    b = attrs.get("batch_dims", 0)
    k, shape = _nd_shapes(node, data.shape, idx.shape, b)
    q = idx.ndim

    def body(*i):
        pos = i[:q - 1]
        rows = tuple(read_index(idx[pos + (j,)], data.shape[b + j], True) for j in range(k))
        return data[pos[:b] + rows + i[q - 1:]]

    return te.compute(shape, body, name=node, tag="injective")


def _expand_shape(node, in_shape, shape):
    """numpy's broadcast of the input's shape and `shape` (ONNX Expand's two-way
    broadcasting), where -1 keeps the input's size (torch's expand)."""
    shape = tuple(int(s) for s in shape)
    n = max(len(shape), len(in_shape))
    full = (1,) * (n - len(in_shape)) + tuple(in_shape)
    want = (1,) * (n - len(shape)) + shape
    out = []
    for d, (s, x) in enumerate(zip(want, full)):
        if s == -1 and d >= n - len(in_shape):
            s = x
        if s < 1 or not (s == x or x == 1 or s == 1):
            raise GraphError(f"node {node} (expand): cannot broadcast {tuple(in_shape)} to "
                             f"{shape}")
        out.append(max(s, x))
    return tuple(out)


def _expand_ref(a, attrs):
    x = a[0]
    return np.ascontiguousarray(np.broadcast_to(x, _expand_shape("", x.shape, attrs["shape"])))


@graph_op("expand", "injective", attrs=("shape",), ref=_expand_ref)
def expand(inputs, attrs, node):
    """np.broadcast_to(x, shape), as a copy."""
    if len(inputs) != 1:
        raise GraphError(f"node {node} (expand): takes 1 input, got {len(inputs)}")
    X = inputs[0]
    shape = _expand_shape(node, X.shape, attrs.get("shape", ()))
    off = len(shape) - X.ndim
    return te.compute(shape, lambda *i: X[tuple(0 if s == 1 else i[off + d]
                                                for d, s in enumerate(X.shape))],
                      name=node, tag="injective")


def _tile_reps(node, ndim, reps):
    reps = tuple(int(r) for r in reps)
    if not reps or any(r < 1 for r in reps):
        raise GraphError(f"node {node} (tile): reps must be positive ints, got {reps}")
    return (1,) * (ndim - len(reps)) + reps


@graph_op("tile", "injective", attrs=("reps",),
          ref=lambda a, at: np.tile(a[0], tuple(at["reps"])))
def tile(inputs, attrs, node):
    """np.tile(x, reps): reps shorter than x's rank repeat the last axes; longer ones add
    leading axes."""
    if len(inputs) != 1:
        raise GraphError(f"node {node} (tile): takes 1 input, got {len(inputs)}")
    X = inputs[0]
    reps = _tile_reps(node, X.ndim, attrs.get("reps", ()))
    in_shape = (1,) * (len(reps) - X.ndim) + tuple(X.shape)
    shape = tuple(s * r for s, r in zip(in_shape, reps))
    off = len(reps) - X.ndim

    def body(*i):
        return X[tuple(i[off + d] % s if reps[off + d] > 1 else i[off + d]
                       for d, s in enumerate(X.shape))]

    return te.compute(shape, body, name=node, tag="injective")
