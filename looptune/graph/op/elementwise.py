"""Elementwise graph operators: activations, and arithmetic with numpy broadcasting.

A binary operator has two tensor inputs, or one input and a Python number in the `scalar`
attribute (`reverse=True` puts the number on the left: `1 - x` is
`op("sub", x, scalar=1.0, reverse=True)`).
"""
from __future__ import annotations

import math

import numpy as np

from ... import te
from ...te.ops.elementwise import _binary
from ..ir import GraphError
from .base import graph_op


def _unary(name: str, fn, ref):
    def build(inputs, attrs, node):
        if len(inputs) != 1:
            raise GraphError(f"node {node} ({name}): takes 1 input, got {len(inputs)}")
        X = inputs[0]
        return te.compute(X.shape, lambda *i: fn(X[i], attrs), name=node, tag="elemwise")
    graph_op(name, "elementwise", attrs=("approximate",) if name == "gelu" else (),
             ref=lambda a, attrs: ref(a[0], attrs).astype(a[0].dtype))(build)


def _gelu(x, attrs):
    if attrs.get("approximate", "none") == "tanh":
        c = math.sqrt(2 / math.pi)
        return 0.5 * x * (1.0 + te.tanh(c * (x + 0.044715 * x * x * x)))
    return x * 0.5 * (1.0 + te.erf(x * (1 / math.sqrt(2))))


def _gelu_ref(x, attrs):
    x64 = x.astype(np.float64)
    if attrs.get("approximate", "none") == "tanh":
        c = math.sqrt(2 / math.pi)
        return 0.5 * x64 * (1 + np.tanh(c * (x64 + 0.044715 * x64 ** 3)))
    from math import erf
    return 0.5 * x64 * (1 + np.vectorize(erf)(x64 / math.sqrt(2)))


def _sigmoid_ref(x):
    return 1 / (1 + np.exp(-x.astype(np.float64)))


_unary("relu", lambda x, a: te.max(x, 0), lambda x, a: np.maximum(x, 0))
_unary("gelu", _gelu, _gelu_ref)
_unary("sigmoid", lambda x, a: te.sigmoid(x), lambda x, a: _sigmoid_ref(x))
_unary("silu", lambda x, a: x * te.sigmoid(x), lambda x, a: x * _sigmoid_ref(x))
_unary("tanh", lambda x, a: te.tanh(x), lambda x, a: np.tanh(x))
_unary("exp", lambda x, a: te.exp(x), lambda x, a: np.exp(x.astype(np.float64)))
_unary("sqrt", lambda x, a: te.sqrt(x), lambda x, a: np.sqrt(x))
_unary("neg", lambda x, a: -x, lambda x, a: -x)
_unary("erf", lambda x, a: te.erf(x), lambda x, a: np.vectorize(math.erf)(x.astype(np.float64)))


def _pow(a, b):
    """a ** b as C's pow: GCC compiles powf(x, 0.5f) as sqrtf(x) (-fno-math-errno), which is
    NaN at -inf, where pow is +inf."""
    if isinstance(b, float) and b == 0.5:
        return te.if_then_else(a == te.const(-math.inf, a.dtype), te.const(math.inf, a.dtype),
                               te.pow(a, b))
    return te.pow(a, b)


_BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "div": (lambda a, b: a / b, np.divide),
    "maximum": (lambda a, b: te.max(a, b), np.maximum),
    "minimum": (lambda a, b: te.min(a, b), np.minimum),
    # C's pow (np.power takes x ** 0.5 for sqrt(x): NaN, not +inf, at -inf)
    "pow": (_pow, np.float_power),
}


def _binary_op(name: str, fn, np_fn, dtype: str | None = None, doc: str = ""):
    """Register binary `name`: fn on te expressions, np_fn on arrays; the reference's result
    has `dtype` (default: the first input's)."""

    def operands(inputs, attrs, node):
        if "scalar" in attrs:
            if len(inputs) != 1:
                raise GraphError(f"node {node} ({name}): with scalar= it takes 1 tensor input, "
                                 f"got {len(inputs)}")
            s = float(attrs["scalar"])
            return (s, inputs[0]) if attrs.get("reverse") else (inputs[0], s)
        if len(inputs) != 2:
            raise GraphError(f"node {node} ({name}): takes 2 inputs (or 1 and scalar=), got "
                             f"{len(inputs)}")
        return inputs[0], inputs[1]

    def build(inputs, attrs, node):
        a, b = operands(inputs, attrs, node)
        return _binary(name, fn, a, b, node)

    def ref(arrays, attrs):
        a, b = operands(arrays, attrs, name)
        return np.asarray(np_fn(a, b)).astype(dtype or arrays[0].dtype)

    build.__doc__ = doc
    graph_op(name, "elementwise", attrs=("scalar", "reverse"), ref=ref)(build)


for _name, (_fn, _np_fn) in _BINARY.items():
    _binary_op(_name, _fn, _np_fn)
