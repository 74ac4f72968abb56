"""Vectorized exp, sigmoid, tanh and erf (codegen/vector_math.py): compiled at the target's
vector width and at 8 lanes, checked against float64 references over the float32 range,
within the errors the module documents."""
from __future__ import annotations

import math

import numpy as np
import pytest

import looptune as lt
from looptune import te
from looptune.runtime import empty

pytestmark = pytest.mark.cc


def inputs() -> np.ndarray:
    dense = np.linspace(-20, 20, 400_001)
    wide = np.concatenate([np.linspace(-110, 110, 20_001), -np.logspace(-30, 2, 4000),
                           np.logspace(-30, 2, 4000)])
    edges = [0.0, -0.0, 0.5, -0.5, 0.625, -0.625, 88.72, 88.73, 89.0, -87.3, -103.9, -104.0,
             1e30, -1e30, np.inf, -np.inf]
    x = np.concatenate([dense, wide, edges]).astype("float32")
    return np.concatenate([x, np.zeros((-len(x)) % 64, "float32")])


def kernel(op: str, n: int, lanes: int):
    X = te.placeholder((n,), name="X")
    Y = te.compute((n,), lambda i: getattr(te, op)(X[i]), name="Y")
    sch = lt.Schedule(te.create_prim_func([X, Y]))
    (i,) = sch.get_loops(sch.get_block("Y"))
    _, inner = sch.split(i, [None, lanes])
    sch.vectorize(inner)
    mod = lt.build(sch)
    assert f"lt_{op}_float32x{lanes}" in mod.source  # vector code, not a libm call per lane
    return mod


REFERENCE = {
    "exp": np.exp,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "erf": np.vectorize(math.erf),
}


@pytest.mark.parametrize("lanes", [8, "target"])
@pytest.mark.parametrize("op", ["exp", "sigmoid", "tanh", "erf"])
def test_vector_math_error_over_the_float_range(op, lanes):
    if lanes == "target":
        lanes = lt.Target.create("cpu").vector_bits // 32
    x = inputs()
    mod = kernel(op, len(x), lanes)
    y = empty(x.shape, "float32")
    with np.errstate(over="ignore"):
        mod(x, y)
        want = REFERENCE[op](x.astype(np.float64))
    overflow = np.abs(want) > np.finfo(np.float32).max  # inf in float32
    assert np.array_equal(np.isinf(y), overflow) and not np.isnan(y).any()
    finite = ~overflow
    err = np.abs(y[finite] - want[finite])
    if op == "exp":
        normal = want[finite] >= np.finfo(np.float32).tiny
        assert (err[normal] / want[finite][normal]).max() <= 4e-7
        assert err[~normal].max() <= 1e-44  # denormal results: within a few of their spacing
    else:
        bound = {"sigmoid": 2e-7, "tanh": 3e-7, "erf": 4e-7}[op]
        assert err.max() <= bound, (op, float(err.max()), float(x[finite][err.argmax()]))
    if op in ("tanh", "erf"):  # near zero the error is relative
        small = (np.abs(x) < 0.5) & (x != 0)
        assert (np.abs(y[small] - want[small]) / np.abs(want[small])).max() <= 3e-7


def test_nan_stays_nan():
    x = np.full(64, np.nan, "float32")
    for op in ("exp", "sigmoid", "tanh", "erf"):
        y = empty(x.shape, "float32")
        kernel(op, 64, 8)(x, y)
        assert np.isnan(y).all(), op


@pytest.mark.parametrize("lanes", [8, "target"])
def test_vector_round_is_numpys_half_to_even_exactly(lanes):
    """Ties both ways, negative zero, the edges of float32's whole numbers, infinities, NaN."""
    if lanes == "target":
        lanes = lt.Target.create("cpu").vector_bits // 32
    ties = np.arange(-40, 40, dtype="float32") + np.float32(0.5)
    edges = np.array([0.0, -0.0, -0.3, 0.3, 0.49999997, -0.49999997, 8388607.5, -8388607.5,
                      8388608.0, 16777217.0, 1e30, -1e30, np.inf, -np.inf, np.nan], "float32")
    x = np.concatenate([ties, edges, inputs()]).astype("float32")
    x = np.concatenate([x, np.zeros((-len(x)) % 64, "float32")])
    mod = kernel("round", len(x), lanes)
    y = empty(x.shape, "float32")
    mod(x, y)
    want = np.round(x)
    got = np.asarray(y)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))
