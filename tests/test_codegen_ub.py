"""Generated code without undefined behaviour: index arithmetic that passes 2**31 is computed
in 64 bits (loop counters, products, flattened offsets), integer division and modulo by zero
give numpy's 0 (and INT_MIN // -1 numpy's INT_MIN) in compiled code, the interpreter and
constant folding, reads whose index cannot be bounded are refused, and comparisons with NaN
follow numpy. Each case runs compiled (scalar and vectorized where it applies) and in the
interpreter, against numpy."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import looptune as lt
from looptune import te
from looptune.tir import interpreter
from looptune.tir.expr import binary, const

RNG = np.random.default_rng(24)
INT32_MIN = np.iinfo(np.int32).min


def vectorize_last(func, lanes=8):
    """Every block's innermost loop split by `lanes` and vectorized."""
    sch = lt.Schedule(func)
    for name in sch.block_names():
        if name == "root":
            continue
        loops = sch.get_loops(sch.get_block(name))
        _, inner = sch.split(loops[-1], [None, lanes])
        sch.vectorize(inner)
    return sch.func


# ------------------------------------------------------------------ 64-bit indices
@pytest.mark.cc
def test_a_loop_of_more_than_2_31_iterations_ends_and_counts_right():
    """An int32 counter of a 3e9-iteration loop overflowed and never ended."""
    k = te.reduce_axis(3_000_000_000, "k")
    out = te.compute((1,), lambda i: te.sum(te.const(1, "int64"), axis=k), name="s")
    mod = lt.build(te.create_prim_func([out]))
    assert "int64_t k = 0" in mod.source
    got = np.zeros(1, "int64")
    mod(got)
    assert got[0] == 3_000_000_000


def _product_index(n=100_000, m=99_991):
    A = te.placeholder((m,), name="A")
    return [A, te.compute((n,), lambda i: A[(i * 50_000 + 7) % m], name="out")]


def _product_index_want(a, n=100_000, m=99_991):
    return a[(np.arange(n, dtype=np.int64) * 50_000 + 7) % m]


@pytest.mark.cc
@pytest.mark.parametrize("schedule", ["plain", "vectorized"])
def test_an_index_product_past_2_31_does_not_overflow(schedule):
    """i * 50000 for i < 100000 reaches 5e9: computed in int32 it wrapped to a wrong
    (or negative) index."""
    func = te.create_prim_func(_product_index())
    mod = lt.build(func if schedule == "plain" else vectorize_last(func))
    a = RNG.uniform(-1, 1, 99_991).astype("float32")
    got = np.empty(100_000, "float32")
    mod(a, got)
    np.testing.assert_array_equal(got, _product_index_want(a))


@pytest.mark.cc
def test_a_vector_loads_base_past_2_31_does_not_overflow():
    """A contiguous vector load whose base, (i * 50000) % 99991, holds a product past 2**31."""
    A = te.placeholder((99_999,), name="A")
    C = te.compute((100_000, 8), lambda i, j: A[(i * 50_000) % 99_991 + j], name="C")
    mod = lt.build(vectorize_last(te.create_prim_func([A, C])))
    assert "lt_float32x8" in mod.source  # a vector load, not a loop
    a = RNG.uniform(-1, 1, 99_999).astype("float32")
    got = np.empty((100_000, 8), "float32")
    mod(a, got)
    base = np.arange(100_000, dtype=np.int64) * 50_000 % 99_991
    np.testing.assert_array_equal(got, a[base[:, None] + np.arange(8)])


def test_the_interpreter_computes_index_products_past_2_31():
    func = te.create_prim_func(_product_index())
    a = RNG.uniform(-1, 1, 99_991).astype("float32")
    got = np.empty(100_000, "float32")
    interpreter.run(func, a, got)
    np.testing.assert_array_equal(got, _product_index_want(a))


@pytest.mark.cc
def test_a_normal_matmul_keeps_32_bit_indices():
    """Widening is only where int32 could overflow: a matmul's code has no int64_t."""
    A = te.placeholder((64, 64), name="A")
    B = te.placeholder((64, 64), name="B")
    k = te.reduce_axis(64, "k")
    C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    func = te.create_prim_func([A, B, C])
    sch = lt.Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i, j0, k, j1)
    sch.vectorize(j1)
    sch.parallel(i)
    for f in (func, sch.func):
        src = lt.build(f).source
        assert "int64" not in src.split("_kernel(")[1]


# ------------------------------------------------------------------ division by zero
def _divisions(dtype):
    X = te.placeholder((40,), dtype, name="X")
    Y = te.placeholder((40,), dtype, name="Y")
    return [X, Y, te.compute((40,), lambda i: X[i] // Y[i], name="q"),
            te.compute((40,), lambda i: X[i] % Y[i], name="r")]


def _division_args(dtype):
    info = np.iinfo(dtype)
    x = RNG.integers(-1000, 1000, 40).astype(dtype)
    y = RNG.integers(-9, 9, 40).astype(dtype)
    y[:8] = 0
    y[8:12] = -1
    x[8:10] = info.min
    x[0] = info.min
    return x, y


def _check_divisions(run, dtype):
    x, y = _division_args(dtype)
    q, r = np.empty(40, dtype), np.empty(40, dtype)
    run(x, y, q, r)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_array_equal(q, x // y)
        np.testing.assert_array_equal(r, x % y)


@pytest.mark.cc
@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("schedule", ["plain", "vectorized"])
def test_compiled_integer_division_by_zero_gives_numpys_zero(dtype, schedule):
    """x // 0 and x % 0 were SIGFPE; INT_MIN // -1 too (the quotient does not fit)."""
    func = te.create_prim_func(_divisions(dtype))
    mod = lt.build(func if schedule == "plain" else vectorize_last(func))
    _check_divisions(mod, dtype)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_the_interpreter_divides_by_zero_as_numpy(dtype):
    _check_divisions(lambda *a: interpreter.run(te.create_prim_func(_divisions(dtype)), *a),
                     dtype)


def _index_division(n=9):
    """i // j and i % j of loop variables, j from 0: in the interpreter these are Python
    ints, whose division by zero raised ZeroDivisionError."""
    return [te.compute((n, n), lambda i, j: (i - 4) // j * 100 + (i - 4) % j, name="d")]


@pytest.mark.cc
@pytest.mark.parametrize("run", ["compiled", "interpreter"])
def test_division_of_loop_variables_by_zero(run):
    func = te.create_prim_func(_index_division())
    i, j = np.meshgrid(np.arange(9) - 4, np.arange(9), indexing="ij")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = (i // j * 100 + i % j).astype("int32")
    got = np.empty((9, 9), "int32")
    if run == "compiled":
        lt.build(func)(got)
    else:
        interpreter.run(func, got)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_constant_folding_divides_by_zero_as_numpy(dtype):
    info = np.iinfo(dtype)
    cases = [(7, 0), (-7, 0), (0, 0), (info.min, -1), (info.min, 0), (-7, 2), (7, -2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for a, b in cases:
            x, y = np.array(a, dtype), np.array(b, dtype)
            for op, want in (("//", x // y), ("%", x % y)):
                got = binary(op, const(a, dtype), const(b, dtype))
                assert got.value == int(want) and got.dtype == dtype, (a, op, b, got)


def test_a_division_by_the_constant_zero_is_accepted():
    """It used to be refused as 'undefined'; it is numpy's 0 now."""
    X = te.placeholder((4,), "int32", name="X")
    C = te.compute((4,), lambda i: X[i] // 0 + X[i] % 0, name="C")
    x = RNG.integers(-50, 50, 4).astype("int32")
    got = np.full(4, 99, "int32")
    interpreter.run(te.create_prim_func([X, C]), x, got)
    np.testing.assert_array_equal(got, np.zeros(4, "int32"))


# ------------------------------------------------------------------ bounds of any index
def test_a_nonlinear_read_outside_its_tensor_is_refused():
    """A[i * i] reaches 81 for i < 10: the bound check skipped indices it could not
    express as affine, so the kernel read other memory."""
    A = te.placeholder((10,), name="A")
    with pytest.raises(te.TEError, match=r"A\[i \* i\].*0\.\.81.*outside its extent 10"):
        te.compute((10,), lambda i: A[i * i], name="C")
    with pytest.raises(te.TEError, match=r"A\[.*\].*outside"):
        te.compute((10, 10), lambda i, j: A[i // (j - 3)], name="C")  # j = 3: i // 0 = 0,
        # but j = 2: i // -1 = -i


def test_an_index_nothing_can_bound_is_refused():
    A = te.placeholder((10,), name="A")
    with pytest.raises(te.TEError, match="cannot bound the index.*of A"):
        te.compute((10,), lambda i: A[te.exp(i.astype("float32")).astype("int32")], name="C")


@pytest.mark.cc
@pytest.mark.parametrize("run", ["compiled", "interpreter"])
def test_nonlinear_reads_inside_their_tensor_compute_right(run):
    """Bounded by interval arithmetic (products, squares, // and % by a variable, which may
    be 0, indices computed in floats and cast) and accepted; gathers (indices read from
    memory) are left alone."""
    A = te.placeholder((100,), name="A")
    Ix = te.placeholder((6,), "int32", name="I")
    C = te.compute((6, 8), lambda i, j: A[i * i] + A[i * j + j] + A[(i * 19) // j]
                   + A[(i * j) % (j - 2) + 1] + A[Ix[i]] + A[(j * 1.3).astype("int32")]
                   + A[te.floor(te.min(i * 0.7, 2.0)).astype("int32")], name="C")
    func = te.create_prim_func([A, Ix, C])
    a = RNG.uniform(-1, 1, 100).astype("float32")
    idx = RNG.integers(0, 100, 6).astype("int32")
    i, j = np.meshgrid(np.arange(6), np.arange(8), indexing="ij")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = (a[i * i] + a[i * j + j] + a[(i * 19) // j] + a[(i * j) % (j - 2) + 1]
                + a[idx][:, None] + a[(j * 1.3).astype("int32")]
                + a[np.floor(np.minimum(i * 0.7, 2.0)).astype("int32")])
    got = np.empty((6, 8), "float32")
    if run == "compiled":
        lt.build(func)(a, idx, got)
    else:
        interpreter.run(func, a, idx, got)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["//", "%", "tdiv", "tmod"])
def test_interval_bounds_of_division_by_a_variable_contain_every_value(op):
    """const_bound of x op y over random ranges (y's spanning 0 included) contains every
    value the interpreter computes, and is finite (it was unbounded)."""
    from looptune.tir.arith.interval import const_bound
    from looptune.tir.expr import Var
    from looptune.tir.interpreter import _floordiv, _floormod, _tdiv, _tmod
    fn = {"//": _floordiv, "%": _floormod, "tdiv": _tdiv, "tmod": _tmod}[op]
    x, y = Var("x"), Var("y")
    rng = np.random.default_rng(5)
    for _ in range(200):
        xs = sorted(rng.integers(-20, 20, 2).tolist())
        ys = sorted(rng.integers(-6, 6, 2).tolist())
        lo, hi = const_bound(binary(op, x, y), {x: tuple(xs), y: tuple(ys)})
        values = [fn(a, b) for a in range(xs[0], xs[1] + 1) for b in range(ys[0], ys[1] + 1)]
        assert lo <= min(values) and max(values) <= hi, (op, xs, ys, lo, hi)
        assert max(abs(lo), abs(hi)) <= 20, (op, xs, ys, lo, hi)


# ------------------------------------------------------------------ one verification rule
def test_compare_matches_nan_to_nan_and_infinity_to_the_same_infinity():
    from looptune.runtime.ndarray import compare
    ref = np.array([1.0, np.nan, np.inf, -np.inf, 1e30], "float32")
    assert compare("y", ref.copy(), ref) is None
    assert compare("y", ref + np.float32(1e-6), ref) is None  # within tolerance
    for k, wrong in ((0, np.nan), (1, 0.0), (2, -np.inf), (2, 3e38), (3, np.inf), (4, np.inf)):
        out = ref.copy()
        out[k] = wrong
        assert compare("y", out, ref) is not None, (k, wrong)
    ints = np.array([1, -7, 0], "int32")
    assert compare("y", ints.copy(), ints) is None
    assert compare("y", ints + 1, ints) is not None


def _pair(fn, name="y"):
    A = te.placeholder((64,), name="A")
    return te.create_prim_func([A, te.compute((64,), lambda i: fn(i, A[i]), name=name)])


@pytest.mark.cc
def test_compile_tirs_verification_judges_by_the_runners_rule():
    """verify (compile_tir's check) scaled its tolerance by max|reference|: one infinite
    element made it infinite and any value passed elsewhere; and it rejected NaN where the
    reference is NaN (log of a negative input), which the runner accepts."""
    from looptune.tune.tune import verify
    inf = float("inf")
    inf_ref = _pair(lambda i, a: te.if_then_else(i == 3, inf, a))
    assert verify(lt.build(inf_ref), inf_ref)
    assert not verify(lt.build(_pair(lambda i, a: te.if_then_else(i == 3, inf, a + 1.0))),
                      inf_ref)                                   # finite elements wrong
    assert not verify(lt.build(_pair(lambda i, a: te.if_then_else(i == 3, -inf, a))),
                      inf_ref)                                   # the other infinity
    assert not verify(lt.build(_pair(lambda i, a: te.if_then_else(i == 3, 3e38, a))),
                      inf_ref)                                   # finite for infinite
    nan_ref = _pair(lambda i, a: te.log(a))                      # NaN for negative inputs
    assert verify(lt.build(nan_ref), nan_ref)
    assert not verify(lt.build(_pair(lambda i, a: te.log(te.abs(a)))), nan_ref)
