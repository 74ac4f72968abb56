"""Elementwise math beyond the basic activations: unary float functions (log, rsqrt, round,
...), the parametric activations of CNNs and transformers (clip, hardswish, leaky_relu, elu,
mish), dtype casts and the remainder `mod`. Each reference computes in float64."""
from __future__ import annotations

import numpy as np

from ... import te
from ..ir import GraphError
from .base import graph_op
from .elementwise import _binary_op

DTYPES = ("float32", "int32", "bfloat16", "uint8", "int8")


def _one(node, op, inputs):
    if len(inputs) != 1:
        raise GraphError(f"node {node} ({op}): takes 1 input, got {len(inputs)}")
    return inputs[0]


def _float_unary(name: str, fn, ref, attrs: tuple = (), doc: str = "", ints: bool = False):
    """Register `name`: out = fn(x, attrs) elementwise on a float tensor (or, with ints, an
    int32 one too); `ref(x64, attrs)` (int64 for an int32 input)."""
    def build(inputs, attrs_, node):
        X = _one(node, name, inputs)
        if not (X.dtype.startswith("float") or ints and X.dtype == "int32"):
            raise GraphError(f"node {node} ({name}): needs a float tensor, got {X.dtype}; "
                             "cast it first")
        return te.compute(X.shape, lambda *i: fn(X[i], attrs_), name=node, tag="elemwise")

    def np_ref(a, attrs_):
        x = a[0].astype(np.float64 if a[0].dtype.kind == "f" else np.int64)
        with np.errstate(all="ignore"):
            return np.asarray(ref(x, attrs_)).astype(a[0].dtype)

    build.__doc__ = doc
    graph_op(name, "elementwise", attrs=attrs, ref=np_ref)(build)


def _softplus(x):
    """log(1 + e^x) as max(x, 0) + log(1 + e^-|x|): no overflow for large x."""
    return te.max(x, 0.0) + te.log(1.0 + te.exp(-te.abs(x)))


def _np_softplus(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _hardsigmoid(x, a):
    alpha, beta = float(a.get("alpha", 1 / 6)), float(a.get("beta", 0.5))
    return te.max(te.min(x * alpha + beta, 1.0), 0.0)


def _clip(x, a):
    lo, hi = a.get("min"), a.get("max")
    if lo is not None:
        x = te.max(x, te.const(lo, x.dtype))
    if hi is not None:
        x = te.min(x, te.const(hi, x.dtype))
    return x


def _sign(x):
    """1, -1, or x itself where it is 0 or NaN (numpy's sign keeps NaN)."""
    return te.if_then_else(x > 0, te.const(1.0, x.dtype),
                           te.if_then_else(x < 0, te.const(-1.0, x.dtype), x))


_float_unary("reciprocal", lambda x, a: 1.0 / x, lambda x, a: 1.0 / x)
_float_unary("rsqrt", lambda x, a: te.rsqrt(x), lambda x, a: 1.0 / np.sqrt(x))
_float_unary("abs", lambda x, a: te.abs(x), lambda x, a: np.abs(x), ints=True)
_float_unary("log", lambda x, a: te.log(x), lambda x, a: np.log(x))
_float_unary("floor", lambda x, a: te.floor(x), lambda x, a: np.floor(x))
_float_unary("ceil", lambda x, a: te.ceil(x), lambda x, a: np.ceil(x))
_float_unary("sin", lambda x, a: te.sin(x), lambda x, a: np.sin(x))
_float_unary("cos", lambda x, a: te.cos(x), lambda x, a: np.cos(x))
_float_unary("round", lambda x, a: te.round(x), lambda x, a: np.round(x),
             doc="Round half to even, as numpy and torch.")
_float_unary("softplus", lambda x, a: _softplus(x), lambda x, a: _np_softplus(x),
             doc="log(1 + exp(x)) (torch's beta=1; its threshold=20 shortcut is exact to "
                 "float32 anyway).")
_float_unary("mish", lambda x, a: x * te.tanh(_softplus(x)),
             lambda x, a: x * np.tanh(_np_softplus(x)))
_float_unary("hardswish", lambda x, a: x * te.min(te.max(x + 3.0, 0.0), 6.0) * (1.0 / 6),
             lambda x, a: x * np.clip(x + 3, 0, 6) / 6)
_float_unary("hardsigmoid", _hardsigmoid,
             lambda x, a: np.clip(x * a.get("alpha", 1 / 6) + a.get("beta", 0.5), 0, 1),
             attrs=("alpha", "beta"), doc="max(0, min(1, alpha * x + beta)); alpha=1/6, "
                                          "beta=0.5 as torch (ONNX's default alpha is 0.2).")
_float_unary("leaky_relu", lambda x, a: te.if_then_else(x >= 0, x, x * float(a.get("alpha", 0.01))),
             lambda x, a: np.where(x >= 0, x, x * a.get("alpha", 0.01)), attrs=("alpha",))
_float_unary("elu", lambda x, a: te.if_then_else(x > 0, x, (te.exp(x) - 1.0)
                                                 * float(a.get("alpha", 1.0))),
             lambda x, a: np.where(x > 0, x, np.expm1(x) * a.get("alpha", 1.0)),
             attrs=("alpha",))
_float_unary("sign", lambda x, a: _sign(x), lambda x, a: np.sign(x), ints=True)


def _clip_ref(a, attrs):
    x = a[0]
    lo, hi = attrs.get("min"), attrs.get("max")
    out = x.astype(np.float64) if x.dtype.kind == "f" else x.astype(np.int64)
    if lo is not None:
        out = np.maximum(out, lo)
    if hi is not None:
        out = np.minimum(out, hi)
    return out.astype(x.dtype)


@graph_op("clip", "elementwise", attrs=("min", "max"), ref=_clip_ref)
def clip(inputs, attrs, node):
    """max(min(x, max), min); either bound may be None (no bound). relu6 is clip(0, 6).
    Works on int32 tensors too (bounds must then be whole numbers)."""
    X = _one(node, "clip", inputs)
    for k in ("min", "max"):
        v = attrs.get(k)
        if v is not None and X.dtype == "int32" and float(v) != int(v):
            raise GraphError(f"node {node} (clip): {k}={v!r} is not a whole number, but the "
                             "input is int32")
    return te.compute(X.shape, lambda *i: _clip(X[i], attrs), name=node, tag="elemwise")


def _cast_ref(a, attrs):
    with np.errstate(all="ignore"):
        return a[0].astype(attrs["dtype"])


@graph_op("cast", "elementwise", attrs=("dtype",), ref=_cast_ref)
def cast(inputs, attrs, node):
    """To dtype "float32", "int32", "bfloat16" (rounded to nearest even, as ml_dtypes),
    "uint8" or "int8" (values in range: the 8-bit storage of a quantized tensor);
    float -> int truncates toward zero, as numpy's astype (NaN and values beyond int32's
    range are undefined: C's conversion)."""
    X = _one(node, "cast", inputs)
    dtype = attrs.get("dtype")
    if dtype not in DTYPES:
        raise GraphError(f"node {node} (cast): dtype must be one of {DTYPES}, got {dtype!r}")
    return te.compute(X.shape, lambda *i: te.astype(X[i], dtype), name=node, tag="elemwise")


def _mod(a, b):
    """np.mod (floor: the sign of b) on integers, with x mod 0 = 0 rather than a fault;
    np.fmod (C's fmod: the sign of a, exact) on floats. (a - b * trunc(a / b) is not: a / b
    overflows to inf for a tiny b, and rounds away the remainder past 2^24.)"""
    from ...tir.expr import convert
    a, b = convert(a), convert(b)
    if a.dtype.startswith("int") and b.dtype.startswith("int"):
        return te.if_then_else(b == 0, te.const(0, a.dtype), a % b)
    return te.fmod(a, b)


def _mod_ref(a, b):
    if np.asarray(a).dtype.kind in "iu" and np.asarray(b).dtype.kind in "iu" \
            and not isinstance(a, float) and not isinstance(b, float):
        b = np.asarray(b)
        with np.errstate(all="ignore"):
            return np.where(b == 0, 0, np.mod(a, np.where(b == 0, 1, b)))
    with np.errstate(all="ignore"):
        return np.fmod(np.asarray(a, np.float64), np.asarray(b, np.float64))


_binary_op("mod", _mod, _mod_ref, doc=_mod.__doc__)
