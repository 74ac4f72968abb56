"""Calling a kernel from Python: the fast path (runtime/call.py) takes ordinary arrays in about
a microsecond, and everything it does not accept still gets the checked path's errors."""
from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

import looptune as lt
from looptune import te
from looptune.runtime import RunError
from looptune.runtime.call import call_lib

pytestmark = pytest.mark.cc


def fma(n=16):
    A, B, C = (te.placeholder((n,), name=x) for x in "ABC")
    D = te.compute((n,), lambda i: A[i] * B[i] + C[i], name="D")
    return te.create_prim_func([A, B, C, D])


@pytest.fixture(scope="module")
def mod():
    return lt.build(fma(), num_threads=1)


def arrays(n=16):
    rng = np.random.default_rng(0)
    return [rng.uniform(-1, 1, n).astype("float32") for _ in range(3)] + [np.zeros(n, "float32")]


def test_layout_check_accepts_this_python():
    assert call_lib() is not None  # CPython + numpy: the fast path is on


def test_ordinary_arrays_take_the_fast_path(mod, monkeypatch):
    a, b, c, d = arrays()
    monkeypatch.setattr(type(mod), "_pack", lambda *_: pytest.fail("took the checked path"))
    mod(a, b, c, d)
    np.testing.assert_allclose(d, a * b + c, rtol=1e-5, atol=1e-6)


def test_what_the_fast_path_refuses_is_checked_in_python(mod):
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
    with pytest.raises(RunError, match="C-contiguous"):
        mod(a, b, np.zeros(32, "float32")[::2], d)
    with pytest.raises(RunError, match=r"shape \(16,\), got \(1, 16\)"):
        mod(a, b, c, d.reshape(1, 16))
    with pytest.raises(RunError, match="takes 4 arrays"):
        mod(a, b, c, d, d)
    ro = np.zeros(16, "float32")
    ro.flags.writeable = False
    with pytest.raises(RunError, match="output and must be writeable"):
        mod(a, b, c, ro)


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
    """A call from Python costs little more than the kernel timed in C (it was 28 us; the
    bound is loose so a busy CI machine does not fail it)."""
    args = arrays()
    in_c = mod.time_evaluator(number=1000, repeat=5)(*args).median
    from_python = _median_call_secs(lambda: mod(*args))
    assert from_python - in_c < 8e-6, (from_python, in_c)
