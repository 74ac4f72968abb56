"""Graph operators that move data: reshape (a view: no kernel), transpose, concat, slice,
pad, and embedding lookup."""
from __future__ import annotations

import numpy as np

from ... import te
from ...te import ops
from ..ir import GraphError
from .base import graph_op


def _one(node, op, inputs):
    if len(inputs) != 1:
        raise GraphError(f"node {node} ({op}): takes 1 input, got {len(inputs)}")
    return inputs[0]


def _flat_index(idx, shape):
    flat = 0
    for i, s in zip(idx, shape):
        flat = flat * s + i
    return flat


def _unflatten(flat, shape):
    out = []
    for s in reversed(shape):
        out.append(flat % s)
        flat = flat // s
    return tuple(reversed(out))


@graph_op("reshape", "view", attrs=("shape",),
          ref=lambda a, at: a[0].reshape(at["shape"]))
def reshape(inputs, attrs, node):
    """A new shape for the same row-major bytes (one -1 is inferred)."""
    X = _one(node, "reshape", inputs)
    shape = list(attrs.get("shape", ()))
    size = int(np.prod(X.shape, dtype=np.int64))
    if shape.count(-1) > 1:
        raise GraphError(f"node {node} (reshape): at most one -1 in shape {tuple(shape)}")
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
        shape[shape.index(-1)] = size // known if known else 0
    if int(np.prod(shape, dtype=np.int64)) != size:
        raise GraphError(f"node {node} (reshape): cannot reshape {X.shape} ({size} elements) to "
                         f"{tuple(attrs.get('shape', ()))}")
    shape = tuple(int(s) for s in shape)
    return te.compute(shape, lambda *i: X[_unflatten(_flat_index(i, shape), X.shape)],
                      name=node, tag="injective")


@graph_op("transpose", "injective", attrs=("perm",),
          ref=lambda a, at: np.ascontiguousarray(np.transpose(a[0], at["perm"])))
def transpose(inputs, attrs, node):
    X = _one(node, "transpose", inputs)
    perm = tuple(attrs.get("perm", ()))
    if sorted(perm) != list(range(X.ndim)):
        raise GraphError(f"node {node} (transpose): perm {perm} is not a permutation of the "
                         f"{X.ndim} axes of {X.shape}")
    shape = tuple(X.shape[p] for p in perm)

    def body(*i):
        src = [None] * X.ndim
        for o, p in enumerate(perm):
            src[p] = i[o]
        return X[tuple(src)]

    return te.compute(shape, body, name=node, tag="injective")


@graph_op("concat", "injective", attrs=("axis",),
          ref=lambda a, at: np.concatenate(a, axis=at.get("axis", 0)))
def concat(inputs, attrs, node):
    if not inputs:
        raise GraphError(f"node {node} (concat): needs at least one input")
    nd = inputs[0].ndim
    axis = attrs.get("axis", 0) % nd
    for t in inputs:
        if t.ndim != nd or any(t.shape[d] != inputs[0].shape[d] for d in range(nd) if d != axis):
            raise GraphError(f"node {node} (concat): shapes {[x.shape for x in inputs]} differ "
                             f"outside axis {axis}")
    offsets, total = [], 0
    for t in inputs:
        offsets.append(total)
        total += t.shape[axis]
    shape = tuple(total if d == axis else s for d, s in enumerate(inputs[0].shape))

    # every offset a multiple of `unit`: which input an element comes from is decided by
    # i // unit, which stays one value across a vector of the axis once split (channels-last
    # concatenations of 32-channel blocks copy whole vectors instead of lane by lane)
    unit = int(np.gcd.reduce([t.shape[axis] for t in inputs]))

    def body(*i):
        out = None  # the first input, then each later one from its offset on
        for t, off in zip(inputs, offsets):
            val = t[tuple(i[d] - off if d == axis else i[d] for d in range(nd))]
            cond = i[axis] // unit >= off // unit if unit > 1 else i[axis] >= off
            out = val if out is None else te.if_then_else(cond, val, out)
        return out

    return te.compute(shape, body, name=node, tag="injective")


def _slice_ref(a, at):
    idx = [slice(None)] * a[0].ndim
    idx[at["axis"]] = slice(at.get("start", 0), at.get("stop"), at.get("step", 1))
    return np.ascontiguousarray(a[0][tuple(idx)])


@graph_op("slice", "injective", attrs=("axis", "start", "stop", "step"), ref=_slice_ref)
def slice_(inputs, attrs, node):
    X = _one(node, "slice", inputs)
    axis = attrs.get("axis", 0) % X.ndim
    start, stop, step = slice(attrs.get("start", 0), attrs.get("stop"),
                              attrs.get("step", 1)).indices(X.shape[axis])
    n = len(range(start, stop, step))
    if n <= 0:
        raise GraphError(f"node {node} (slice): [{start}:{stop}:{step}] of axis {axis} "
                         f"(size {X.shape[axis]}) is empty")
    shape = tuple(n if d == axis else s for d, s in enumerate(X.shape))

    def body(*i):
        return X[tuple(i[d] * step + start if d == axis else i[d] for d in range(X.ndim))]

    return te.compute(shape, body, name=node, tag="injective")


def _pad_ref(a, at):
    return np.pad(a[0], list(zip(at["pad_before"], at["pad_after"])),
                  constant_values=at.get("value", 0.0))


@graph_op("pad", "injective", attrs=("pad_before", "pad_after", "value"), ref=_pad_ref)
def pad(inputs, attrs, node):
    X = _one(node, "pad", inputs)
    value = float(attrs.get("value", 0.0))
    if X.dtype.startswith("int"):  # a float value would make the padded tensor float
        value = te.const(int(value), X.dtype)
    return ops.pad(X, tuple(attrs["pad_before"]), tuple(attrs["pad_after"]), value, name=node)


def _embedding_ref(a, attrs):
    from .gather import checked_indices
    return a[0][checked_indices(a[1], a[0].shape[0], "embedding", attrs.get("wrap", True))]


@graph_op("embedding", "injective", attrs=("wrap",), ref=_embedding_ref)
def embedding(inputs, attrs, node):
    """Rows of a table (first input) picked by integer indices (second input): gather on
    axis 0, with gather's index semantics (`wrap`: negative ids count from the end)."""
    from .gather import _index, read_index
    table, ids = _index(node, "embedding", inputs)
    shape = tuple(ids.shape) + tuple(table.shape[1:])
    k = ids.ndim
    wrap = bool(attrs.get("wrap", True))

    def body(*i):
        return table[(read_index(ids[i[:k]], table.shape[0], wrap),) + tuple(i[k:])]

    return te.compute(shape, body, name=node, tag="injective")
