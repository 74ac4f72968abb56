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


@pytest.mark.cc
def test_tensors_and_axes_named_after_c_types_keywords_and_generated_symbols_compile():
    """C keywords (int, _Bool), main, library functions (exp, expf, omp_get_num_threads),
    the type names the code itself uses (int32_t, size_t: a parameter of that name hid the
    type) and the kernel's own generated symbols (k_kernel_par0, k_kernel_packed), as
    tensor names and as axis names, in a parallel and vectorized kernel."""
    names = ["INFINITY", "NAN", "HUGE_VAL", "int", "main", "_Bool", "omp_get_num_threads",
             "exp", "expf", "int32_t", "int64_t", "size_t", "uint8_t", "k_kernel_par0",
             "lt_par0_k_kernel", "k_kernel_packed", "k_kernel_set_num_threads", "index"]
    ins = [te.placeholder((64,), name=n) for n in names]

    def body(int32_t, size_t):
        return sum((x[int32_t * 8 + size_t] * (k + 1) for k, x in enumerate(ins)),
                   te.const(0.0))
    func = te.create_prim_func([*ins, te.compute((8, 8), body, name="exp")], name="k")
    sch = lt.Schedule(func)
    outer, inner = sch.get_loops(sch.get_block("exp"))
    sch.parallel(outer)
    sch.vectorize(inner)
    arrays = [RNG.uniform(-1, 1, 64).astype("float32") for _ in names]
    want = sum(a * (k + 1) for k, a in enumerate(arrays)).reshape(8, 8)
    for f in (func, sch.func):
        got = np.empty((8, 8), "float32")
        lt.build(f)(*arrays, got)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    got = np.empty((8, 8), "float32")
    interpreter.run(func, *arrays, got)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def comparisons(n=70):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    return [A, B,
            te.compute((n,), lambda i: A[i] == B[i], name="eq"),
            te.compute((n,), lambda i: A[i] != B[i], name="ne"),
            te.compute((n,), lambda i: A[i] < B[i], name="lt"),
            te.compute((n,), lambda i: A[i] >= B[i], name="ge"),
            te.compute((n,), lambda i: te.if_then_else(A[i] < B[i], A[i], B[i]), name="sel"),
            te.compute((n,), lambda i: te.if_then_else(A[i] > 0.0, A[i], 0.0), name="pos"),
            te.compute((n,), lambda i: te.if_then_else(A[i] != A[i], 1.0, A[i]), name="fix")]


def check_comparisons(run):
    a, b = with_nans(70), with_nans(70)
    a[:4], b[:4] = [np.nan, 1.0, np.nan, 2.0], [1.0, np.nan, np.nan, 2.0]
    outs = [np.empty(70, "bool") for _ in range(4)] + [np.empty(70, "float32") for _ in range(3)]
    run(a, b, *outs)
    want = [a == b, a != b, a < b, a >= b, np.where(a < b, a, b), np.where(a > 0, a, 0),
            np.where(np.isnan(a), 1, a)]
    for name, got, w in zip(("eq", "ne", "lt", "ge", "sel", "pos", "fix"), outs, want):
        np.testing.assert_array_equal(got, w, err_msg=name)


@pytest.mark.cc
@pytest.mark.parametrize("schedule", ["plain", "vectorized", "interpreter"])
def test_comparisons_and_selections_with_nan_follow_numpy(schedule):
    func = te.create_prim_func(comparisons())
    if schedule == "interpreter":
        check_comparisons(lambda *x: interpreter.run(func, *x))
        return
    check_comparisons(lt.build(func if schedule == "plain" else vectorized_all(func)))


def vectorized_all(func):
    sch = lt.Schedule(func)
    for name in sch.block_names():
        if name != "root":
            _, inner = sch.split(sch.get_loops(sch.get_block(name))[-1], [None, 8])
            sch.vectorize(inner)
    return sch.func


def test_constant_comparisons_with_nan_fold_as_numpy():
    from looptune.tir.expr import binary, const, select
    nan, one = const(float("nan")), const(1.0)
    for op, want in (("==", False), ("!=", True), ("<", False), ("<=", False), (">", False),
                     (">=", False)):
        assert binary(op, nan, one).value is want and binary(op, nan, nan).value is want
    assert select(binary("<", nan, one), one, const(2.0)).value == 2.0
