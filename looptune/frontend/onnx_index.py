"""ONNX handlers (see onnx_ops.py) for the operators that take indices: Gather,
GatherElements and GatherND. Negative indices count from the end; out-of-range constant ones
are refused when importing, runtime ones raise when the compiled model runs (ONNX Runtime
refuses both)."""
from __future__ import annotations

import numpy as np

from .onnx_ops import InvalidModel, _on, _slice_axis


def _const_indices(name, idx, n, axis, op):
    """Constant indices (an array) with negative ones wrapped; out-of-range ones refused as
    ONNX Runtime refuses them."""
    i = np.asarray(idx).astype(np.int64)
    bad = i[(i < -n) | (i >= n)]
    if bad.size:
        raise InvalidModel(f"node {name}: {op} index {int(bad.reshape(-1)[0])} is out of range "
                           f"for axis {axis} of size {n} (ONNX Runtime refuses it too); fix the "
                           "model's indices")
    return np.where(i < 0, i + n, i)


@_on("Gather")
def _gather(imp, name, ins, at):
    data, idx = ins
    axis = at.get("axis", 0) % len(data.shape)
    n = data.shape[axis]
    if not idx.is_const:
        if axis == 0 and data.is_const:
            return imp.op("embedding", data, idx, name=name)
        return imp.op("gather", data, idx, name=name, axis=axis)
    i = _const_indices(name, idx.data, n, axis, "Gather")
    if data.is_const:
        return imp.const(name, np.take(data.data, i, axis=axis))
    flat = i.reshape(-1)
    step = int(flat[1] - flat[0]) if flat.size > 1 else 1
    if flat.size and step >= 1 and np.array_equal(flat, flat[0] + step * np.arange(flat.size)):
        # a strided range of indices is a slice
        y = _slice_axis(imp, name, data, axis, int(flat[0]), int(flat[-1]) + 1, step)
        return imp.e.reshape(y, data.shape[:axis] + i.shape + data.shape[axis + 1:], name)
    return imp.op("gather", data, imp.const(name + "_idx", i.astype(np.int32)), name=name,
                  axis=axis)


@_on("GatherElements")
def _gather_elements(imp, name, ins, at):
    data, idx = ins
    axis = at.get("axis", 0) % len(data.shape)
    if idx.is_const:
        i = _const_indices(name, idx.data, data.shape[axis], axis, "GatherElements")
        if data.is_const:
            return imp.const(name, np.take_along_axis(data.data, i, axis=axis))
        idx = imp.const(name + "_idx", i.astype(np.int32))
    return imp.op("gather_elements", data, idx, name=name, axis=axis)




@_on("GatherND")
def _gather_nd(imp, name, ins, at):
    data, idx = ins
    b = int(at.get("batch_dims", 0))
    if idx.is_const and idx.shape and 1 <= idx.shape[-1] <= len(data.shape) - b:
        i = np.asarray(idx.data).astype(np.int64)
        for j in range(i.shape[-1]):
            _const_indices(name, i[..., j], data.shape[b + j], b + j, "GatherND")
    return imp.op("gather_nd", data, idx, name=name, batch_dims=b)
