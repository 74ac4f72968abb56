"""Generated code without surprises: numerical semantics as numpy's, in compiled kernels
(scalar and vectorized code) and in the interpreter (a NaN wins in max, min, relu and max/min
reductions), and any user name compiles (names of C macros, library functions, reserved
identifiers)."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune import te
from looptune.tir import interpreter

RNG = np.random.default_rng(11)


def with_nans(shape):
    a = RNG.uniform(-1, 1, shape).astype("float32")
    a.flat[RNG.choice(a.size, a.size // 5, replace=False)] = np.nan
    return a


def elementwise(n=70):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    return [A, B,
            te.compute((n,), lambda i: te.max(A[i], B[i]), name="mx"),
            te.compute((n,), lambda i: te.min(A[i], B[i]), name="mn"),
            te.compute((n,), lambda i: te.max(A[i], 0.0), name="relu")]


def reductions(m=6, n=40):
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis(n, "k")
    return [A, te.compute((m,), lambda i: te.max(A[i, k], axis=k), name="rmax"),
            te.compute((m,), lambda i: te.min(A[i, k], axis=k), name="rmin")]


def vectorized(func):
    sch = lt.Schedule(func)
    for name in sch.block_names():
        if name == "root":
            continue
        loops = sch.get_loops(sch.get_block(name))
        _, inner = sch.split(loops[-1], [None, 8 if name in ("mx", "mn", "relu") else 4])
        if name in ("mx", "mn", "relu"):
            sch.vectorize(inner)
    return sch


def check_elementwise(run):
    a, b = with_nans(70), with_nans(70)
    a[:3], b[:3] = np.nan, [1.0, np.nan, -1.0]
    mx, mn, relu = (np.empty(70, "float32") for _ in range(3))
    run(a, b, mx, mn, relu)
    np.testing.assert_array_equal(mx, np.maximum(a, b))
    np.testing.assert_array_equal(mn, np.minimum(a, b))
    np.testing.assert_array_equal(relu, np.maximum(a, 0))


def check_reductions(run):
    a = RNG.uniform(-1, 1, (6, 40)).astype("float32")
    a[1, 0], a[2, 39], a[3, 17] = np.nan, np.nan, np.nan
    rmax, rmin = np.empty(6, "float32"), np.empty(6, "float32")
    run(a, rmax, rmin)
    np.testing.assert_array_equal(rmax, a.max(axis=1))
    np.testing.assert_array_equal(rmin, a.min(axis=1))


def test_the_interpreter_lets_nan_win_as_numpy():
    check_elementwise(lambda *x: interpreter.run(te.create_prim_func(elementwise()), *x))
    check_reductions(lambda *x: interpreter.run(te.create_prim_func(reductions()), *x))


@pytest.mark.cc
@pytest.mark.parametrize("schedule", ["plain", "vectorized"])
def test_compiled_max_min_and_relu_let_nan_win_as_numpy(schedule):
    func = te.create_prim_func(elementwise())
    mod = lt.build(func if schedule == "plain" else vectorized(func).func)
    check_elementwise(mod)


@pytest.mark.cc
@pytest.mark.parametrize("schedule", ["plain", "split"])
def test_compiled_max_and_min_reductions_let_nan_win_as_numpy(schedule):
    func = te.create_prim_func(reductions())
    mod = lt.build(func if schedule == "plain" else vectorized(func).func)
    check_reductions(mod)


@pytest.mark.cc
def test_tensors_named_after_macros_and_library_functions_compile_and_run():
    """INFINITY, NAN and HUGE_VAL are math.h macros, free and abort functions the code
    calls, a leading underscore is C's: each becomes another identifier in the code."""
    names = ["INFINITY", "NAN", "HUGE_VAL", "free", "errno", "M_PI", "_start", "linux"]
    ins = [te.placeholder((16,), name=n) for n in names]
    out = te.compute((16,), lambda i: sum((x[i] * (k + 1) for k, x in enumerate(ins)),
                                          te.const(0.0)), name="abort")
    mod = lt.build(te.create_prim_func([*ins, out], name="NAN"))
    arrays = [RNG.uniform(-1, 1, 16).astype("float32") for _ in names]
    got = np.empty(16, "float32")
    mod(*arrays, got)
    want = sum(a * (k + 1) for k, a in enumerate(arrays))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
