"""Elementwise operators; binary ones broadcast like numpy (shapes aligned from the right,
a dimension of size 1 stretches to match)."""
from __future__ import annotations

import math

from ... import te
from ._common import check, expect_tensor, shape_str


def relu(X, name: str = "relu"):
    expect_tensor(name, "X", X)
    return te.compute(X.shape, lambda *i: te.max(X[i], 0), name=name, tag="elemwise")


def gelu(X, name: str = "gelu"):
    """The exact (erf) form: x * (1 + erf(x / sqrt 2)) / 2, as PyTorch's default."""
    expect_tensor(name, "X", X)
    c = 1 / math.sqrt(2)
    return te.compute(X.shape, lambda *i: X[i] * 0.5 * (1.0 + te.erf(X[i] * c)), name=name,
                      tag="elemwise")


def broadcast_shape(op: str, a: tuple, b: tuple) -> tuple:
    out = []
    for d in range(1, max(len(a), len(b)) + 1):
        x = a[-d] if d <= len(a) else 1
        y = b[-d] if d <= len(b) else 1
        check(x == y or 1 in (x, y),
              f"{op}: A is {shape_str(a)} and B is {shape_str(b)}: dimensions {x} and {y} "
              f"(axis -{d}) do not broadcast; numpy rules need them equal or one of them 1")
        out.append(max(x, y))
    return tuple(reversed(out))


def _read(T, out_shape: tuple, idx: tuple):
    """T at the output index idx, with T's leading dims missing and its size-1 dims fixed at 0."""
    off = len(out_shape) - T.ndim
    return T[tuple(0 if s == 1 else idx[off + d] for d, s in enumerate(T.shape))]


def _binary(op: str, fn, A, B, name: str):
    """fn(a, b) elementwise; either side may be a Python number."""
    scalars = (int, float)
    check(not (isinstance(A, scalars) and isinstance(B, scalars)),
          f"{op}: at least one of A and B must be a te.Tensor")
    if isinstance(A, scalars):
        expect_tensor(op, "B", B)
        return te.compute(B.shape, lambda *i: fn(A, B[i]), name=name, tag="elemwise")
    if isinstance(B, scalars):
        expect_tensor(op, "A", A)
        return te.compute(A.shape, lambda *i: fn(A[i], B), name=name, tag="elemwise")
    expect_tensor(op, "A", A)
    expect_tensor(op, "B", B)
    shape = broadcast_shape(op, A.shape, B.shape)
    return te.compute(shape, lambda *i: fn(_read(A, shape, i), _read(B, shape, i)), name=name,
                      tag="elemwise" if A.shape == B.shape else "broadcast")


def add(A, B, name: str = "add"):
    return _binary("add", lambda a, b: a + b, A, B, name)


def multiply(A, B, name: str = "multiply"):
    return _binary("multiply", lambda a, b: a * b, A, B, name)
