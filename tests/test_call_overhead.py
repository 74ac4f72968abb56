"""Calling a kernel from Python: the fast path (runtime/call.py) takes ordinary arrays in C -
through the CPython extension, or through ctypes where the extension cannot be built - and
everything it does not accept still gets the checked path's errors."""
from __future__ import annotations

import functools
import statistics
import threading
import time
import types

import numpy as np
import pytest

import looptune as lt
from looptune import te
from looptune.runtime import RunError
from looptune.runtime import call as fastcall
from looptune.runtime.call import MISMATCH, call_ext, call_lib
from looptune.runtime.module import Module

pytestmark = pytest.mark.cc


def fma(n=16):
    A, B, C = (te.placeholder((n,), name=x) for x in "ABC")
    D = te.compute((n,), lambda i: A[i] * B[i] + C[i], name="D")
    return te.create_prim_func([A, B, C, D])


def dense(m=3, k=20, n=7):
    """relu(x @ W + b), with an int32 count beside it: arguments of several ranks and dtypes."""
    X = te.placeholder((m, k), name="X")
    W = te.placeholder((k, n), name="W")
    b = te.placeholder((n,), name="b")
    r = te.reduce_axis(k, "r")
    Y = te.compute((m, n), lambda i, j: te.sum(X[i, r] * W[r, j], axis=r), name="Y")
    Z = te.compute((m, n), lambda i, j: te.max(Y[i, j] + b[j], 0.0), name="Z")
    Cnt = te.placeholder((n,), "int32", name="Cnt")
    Out = te.compute((n,), lambda j: Cnt[j] + 1, name="Out")
    return te.create_prim_func([X, W, b, Cnt, Z, Out])


@pytest.fixture(scope="module")
def mod():
    return lt.build(fma(), num_threads=1)


def arrays(n=16):
    rng = np.random.default_rng(0)
    return [rng.uniform(-1, 1, n).astype("float32") for _ in range(3)] + [np.zeros(n, "float32")]


def refuse_python_path(monkeypatch):
    """Fail the test if a call goes to Python's checks."""
    for name in ("_pack", "_checked_call", "_call_in_python"):
        monkeypatch.setattr(Module, name, lambda *_, n=name: pytest.fail(f"took {n}"))


@pytest.fixture
def without_extension(monkeypatch):
    """The extension cannot be built: its header is missing (each test builds it again)."""
    monkeypatch.setattr(fastcall, "python_includes", lambda: ["/nonexistent/include"])
    call_ext.cache_clear()
    yield
    call_ext.cache_clear()


def test_this_python_builds_the_extension_and_the_ctypes_library():
    assert call_ext() is not None and call_lib() is not None  # the layout checks pass


def test_ordinary_arrays_take_the_c_method(mod, monkeypatch):
    assert type(mod._call).__name__ == "FastCall"
    assert isinstance(vars(Module)["__call__"], types.MethodDescriptorType)  # no Python frame
    a, b, c, d = arrays()
    refuse_python_path(monkeypatch)
    mod(a, b, c, d)
    np.testing.assert_allclose(d, a * b + c, rtol=1e-5, atol=1e-6)


def test_the_c_method_is_numerically_right_for_several_ranks_and_dtypes(monkeypatch):
    m = lt.build(dense(), num_threads=1)
    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in ((3, 20), (20, 7), (7,)))
    cnt = rng.integers(-50, 50, 7).astype("int32")
    z, o = np.full((3, 7), np.nan, "float32"), np.zeros(7, "int32")
    refuse_python_path(monkeypatch)
    m(x, w, b, cnt, z, o)
    np.testing.assert_allclose(z, np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(o, cnt + 1)


def test_fast_call_answers_status(mod):
    a, b, c, d = arrays()
    assert mod._call((a, b, c, d)) == 0
    assert mod._call((a, b, c)) == MISMATCH
    assert mod._call((a, b, c, d.astype("float64"))) == MISMATCH
    with pytest.raises(ValueError, match="malformed spec"):
        type(mod._call)(1, b"\0" * 24, (), False)


def check_refusals(mod):
    """What the fast path does not take: the checked path runs it, or raises its errors."""
    a, b, c, d = arrays()

    class Sub(np.ndarray):
        pass

    out = np.zeros(16, "float32").view(Sub)  # a subclass: checked path, still runs
    mod(a, b, c, out)
    np.testing.assert_allclose(np.asarray(out), a * b + c, rtol=1e-5, atol=1e-6)
    buf = np.zeros(40, "float32")
    with pytest.raises(RunError, match="arguments A and D overlap"):
        mod(buf[0:16], b, c, buf[8:24])
    with pytest.raises(RunError, match="arguments A and D overlap"):
        mod(d, b, c, d)
    mod(a, a, a, d)  # inputs may alias each other
    np.testing.assert_allclose(d, a * a + a, rtol=1e-5, atol=1e-6)
    with pytest.raises(RunError, match="dtype float32, got >f4"):
        mod(a, b, c.astype(">f4"), d)
    with pytest.raises(RunError, match="dtype float32, got float64"):
        mod(a, b, c.astype("float64"), d)
    with pytest.raises(RunError, match="C-contiguous"):
        mod(a, b, np.zeros(32, "float32")[::2], d)
    with pytest.raises(RunError, match=r"shape \(16,\), got \(1, 16\)"):
        mod(a, b, c, d.reshape(1, 16))
    with pytest.raises(RunError, match=r"shape \(16,\), got \(15,\)"):
        mod(a, b, c[:15], d)
    with pytest.raises(RunError, match="takes 4 arrays"):
        mod(a, b, c, d, d)
    with pytest.raises(RunError, match="takes 4 arrays"):
        mod(a, b, c)
    with pytest.raises(RunError, match="argument D must be a numpy array, got list"):
        mod(a, b, c, [0.0] * 16)
    ro = np.zeros(16, "float32")
    ro.flags.writeable = False
    with pytest.raises(RunError, match="output and must be writeable"):
        mod(a, b, c, ro)
    ro_in = a.copy()
    ro_in.flags.writeable = False
    mod(ro_in, b, c, d)  # a read-only input is fine, and fast
    np.testing.assert_allclose(d, a * b + c, rtol=1e-5, atol=1e-6)


def test_what_the_c_method_refuses_is_checked_in_python(mod):
    check_refusals(mod)


def test_the_ctypes_path_when_the_extension_cannot_be_built(without_extension, monkeypatch):
    assert call_ext() is None
    m = lt.build(fma(), num_threads=1)
    assert isinstance(m._call, functools.partial) and m._call.func is call_lib().lt_call
    # with the Python __call__ (as before the extension was ever built), and with the C method
    # of an extension built earlier in this process, which hands it to Python
    for method in dict.fromkeys([Module._call_in_python, vars(Module)["__call__"]]):
        monkeypatch.setattr(Module, "__call__", method)
        a, b, c, d = arrays()
        with monkeypatch.context() as m2:
            m2.setattr(Module, "_pack", lambda *_: pytest.fail("took the checked path"))
            m(a, b, c, d)
        np.testing.assert_allclose(d, a * b + c, rtol=1e-5, atol=1e-6)
        check_refusals(m)


def test_a_failing_build_of_the_extension_leaves_ctypes(monkeypatch):
    monkeypatch.setattr(fastcall, "_EXT_SOURCE", "#error this does not build\n")
    call_ext.cache_clear()
    try:
        assert call_ext() is None
        assert fastcall.fast_call(1, lt.build(fma(), num_threads=1).args).func is \
            call_lib().lt_call
    finally:
        call_ext.cache_clear()


def test_without_any_fast_path_python_checks_every_call(mod, monkeypatch):
    monkeypatch.setattr(fastcall, "call_ext", lambda: None)
    monkeypatch.setattr(fastcall, "call_lib", lambda: None)
    m = Module(mod.lib_path, mod.symbol, mod.args, "")
    assert m._call is None
    check_refusals(m)


def test_the_gil_is_released_for_large_kernels_or_when_asked(mod):
    assert not mod._call.release_gil  # 256 bytes: a short kernel keeps it
    n = fastcall.RELEASE_GIL_BYTES // 16
    assert lt.build(fma(n), num_threads=1)._call.release_gil
    assert Module(mod.lib_path, mod.symbol, mod.args, "", release_gil=True)._call.release_gil


def test_other_threads_run_while_a_kernel_does():
    n = 1 << 22  # 64 MiB in all: a call of milliseconds
    m = lt.build(fma(n), num_threads=1)
    a, b, c, d = (np.ones(n, "float32") for _ in range(4))
    m(a, b, c, d)
    ticks, stop = [], threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.0005)

    t = threading.Thread(target=tick)
    t.start()
    time.sleep(0.01)
    try:
        for _ in range(5):
            t0 = time.perf_counter()
            m(a, b, c, d)
            t1 = time.perf_counter()
            # in the middle: a thread switch just before or after the kernel does not count
            lo, hi = t0 + (t1 - t0) / 4, t1 - (t1 - t0) / 4
            if any(lo < x < hi for x in ticks):
                break
        else:
            pytest.fail("no other thread ran during five calls")
    finally:
        stop.set()
        t.join()
    np.testing.assert_array_equal(d, 2.0)


def _median_call_secs(fn, loops=2000, repeat=9) -> float:
    fn()
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(loops):
            fn()
        out.append((time.perf_counter() - t) / loops)
    return statistics.median(out)


def test_call_overhead_is_a_few_microseconds(mod):
    """A call from Python costs little more than the kernel timed in C (it was 28 us, then
    0.6 us through ctypes, now about 0.1 us; the bound is loose so a busy CI machine does not
    fail it)."""
    args = arrays()
    in_c = mod.time_evaluator(number=1000, repeat=5)(*args).median
    from_python = _median_call_secs(lambda: mod(*args))
    assert from_python - in_c < 8e-6, (from_python, in_c)
