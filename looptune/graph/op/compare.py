"""Comparisons, logic and selection. The graph has no boolean dtype: a truth value is an int32
0 or 1, and logic operators read any nonzero value as true.

Comparisons broadcast like the arithmetic operators and take `scalar=` / `reverse=` the same
way (`op("less", x, scalar=0.0)` is x < 0)."""
from __future__ import annotations

import numpy as np

from ... import te
from ...te.ops.elementwise import _read, broadcast_shape
from ...tir.expr import convert
from ..ir import GraphError
from .base import graph_op
from .elementwise import _binary_op


def _truth(x):
    """A te condition from a value: nonzero is true (a comparison's bool stays as it is)."""
    x = convert(x)
    return x if x.dtype == "bool" else x != te.const(0, x.dtype)


def _as_int(cond):
    return te.astype(cond, "int32")


_COMPARE = {
    "equal": (lambda a, b: a == b, np.equal),
    "not_equal": (lambda a, b: a != b, np.not_equal),
    "less": (lambda a, b: a < b, np.less),
    "less_equal": (lambda a, b: a <= b, np.less_equal),
    "greater": (lambda a, b: a > b, np.greater),
    "greater_equal": (lambda a, b: a >= b, np.greater_equal),
}


for _name, (_fn, _np_fn) in _COMPARE.items():
    _binary_op(_name, (lambda f: lambda a, b: _as_int(f(a, b)))(_fn), _np_fn, dtype="int32",
               doc="Elementwise comparison with numpy broadcasting: int32 1 where true, else 0 "
                   "(NaN compares unequal to everything).")

_binary_op("logical_and", lambda a, b: _as_int(te.all(_truth(a), _truth(b))),
           lambda a, b: np.logical_and(a, b), dtype="int32",
           doc="1 where both inputs are nonzero, else 0.")
_binary_op("logical_or", lambda a, b: _as_int(te.any(_truth(a), _truth(b))),
           lambda a, b: np.logical_or(a, b), dtype="int32",
           doc="1 where either input is nonzero, else 0.")


def _one(node, op, inputs):
    if len(inputs) != 1:
        raise GraphError(f"node {node} ({op}): takes 1 input, got {len(inputs)}")
    return inputs[0]


@graph_op("logical_not", "elementwise",
          ref=lambda a, at: np.logical_not(a[0]).astype(np.int32))
def logical_not(inputs, attrs, node):
    """1 where the input is 0, else 0."""
    X = _one(node, "logical_not", inputs)
    return te.compute(X.shape, lambda *i: _as_int(~_truth(X[i])), name=node, tag="elemwise")


@graph_op("isnan", "elementwise", ref=lambda a, at: np.isnan(a[0]).astype(np.int32))
def isnan(inputs, attrs, node):
    """1 where the float input is NaN, else 0."""
    X = _one(node, "isnan", inputs)
    if not X.dtype.startswith("float"):
        raise GraphError(f"node {node} (isnan): needs a float tensor, got {X.dtype}")
    return te.compute(X.shape, lambda *i: _as_int(X[i] != X[i]), name=node, tag="elemwise")


def _where_ref(a, attrs):
    cond, x, y = a
    return np.where(cond != 0, x, y).astype(x.dtype)


@graph_op("where", "elementwise", ref=_where_ref)
def where(inputs, attrs, node):
    """where(cond, x, y): x where cond is nonzero, else y; all three broadcast like numpy.
    The output has x's dtype (y is converted to it)."""
    if len(inputs) != 3:
        raise GraphError(f"node {node} (where): takes 3 inputs (cond, x, y), got {len(inputs)}")
    C, X, Y = inputs
    shape = broadcast_shape("where", broadcast_shape("where", C.shape, X.shape), Y.shape)
    same = C.shape == X.shape == Y.shape == shape

    def body(*i):
        y = _read(Y, shape, i)
        return te.if_then_else(_truth(_read(C, shape, i)), _read(X, shape, i),
                               te.astype(y, X.dtype))

    return te.compute(shape, body, name=node, tag="elemwise" if same else "broadcast")
