"""The build and run layer: compiler errors, the kernel cache, argument checks, timing."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

import looptune as lt
from looptune import te
from looptune.runtime import BuildError, RunError, compile_shared
from looptune.runtime.module import ProfileResult

pytestmark = pytest.mark.cc


def add_func(n=256):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    return te.create_prim_func([A, B, C])


def test_compiler_error_becomes_build_error_with_message_and_path():
    with pytest.raises(BuildError) as e:
        compile_shared("int broken( { return 0; }\n", name="broken")
    err = e.value
    assert "the C compiler failed" in str(err)
    assert "error" in err.log
    assert err.source_path and os.path.exists(err.source_path)
    assert open(err.source_path).read().startswith("int broken(")


def test_missing_compiler_is_a_clear_build_error(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(BuildError, match="cannot run the C compiler '/nonexistent/cc'.*set CC"):
        compile_shared("int f(void) { return 1; }\n", name="nocc")


def test_compile_cache_reuses_the_library():
    src = "int answer(void) { return 42; }\n"
    p1 = compile_shared(src, name="cached")
    mtime = os.path.getmtime(p1)
    p2 = compile_shared(src, name="cached")
    assert p1 == p2 and os.path.getmtime(p2) == mtime
    p3 = compile_shared(src, name="cached", flags=("-O1", "-fPIC", "-shared"))
    assert p3 != p1


def test_build_timeout_is_a_build_error():
    # a pathological source that takes the compiler a while: many unrolled statements
    body = "\n".join(f"  x = x * 1.0001f + {i}.0f;" for i in range(40000))
    src = f"float slow(float x) {{\n{body}\n  return x;\n}}\n"
    with pytest.raises(BuildError, match="longer than"):
        compile_shared(src, name="slow", timeout=0.05)


@pytest.fixture(scope="module")
def mod():
    return lt.build(add_func())


def test_argument_checks(mod):
    a = np.ones(256, "float32")
    b = np.ones(256, "float32")
    c = np.zeros(256, "float32")
    with pytest.raises(RunError, match=r"takes 3 arrays \(A, B, C\), got 2"):
        mod(a, b)
    with pytest.raises(RunError, match="argument B must have dtype float32, got float64"):
        mod(a, b.astype("float64"), c)
    with pytest.raises(RunError, match=r"argument C must have shape \(256,\), got \(128,\)"):
        mod(a, b, c[:128])
    with pytest.raises(RunError, match="C-contiguous"):
        mod(a, np.ones(512, "float32")[::2], c)
    with pytest.raises(RunError, match="must be a numpy array"):
        mod(a, list(b), c)
    ro = np.zeros(256, "float32")
    ro.setflags(write=False)
    with pytest.raises(RunError, match="argument C is an output and must be writeable"):
        mod(a, b, ro)
    with pytest.raises(RunError, match="overlap"):
        mod(a, b, a)


def test_call_and_time(mod, rng):
    a, b = (rng.uniform(-1, 1, 256).astype("float32") for _ in range(2))
    c = np.zeros(256, "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a + b)
    r = mod.time_evaluator(number=5, repeat=4)(a, b, c)
    assert isinstance(r, ProfileResult) and len(r.results) == 4
    assert all(t > 0 for t in r.results)
    assert r.min <= r.median <= max(r.results)
    flushed = mod.time_evaluator(number=1, repeat=2, enable_cpu_cache_flush=True,
                                 flush_bytes=1 << 20)(a, b, c)
    assert len(flushed.results) == 2


def test_min_repeat_ms_lengthens_each_repeat(mod, rng):
    a, b = (rng.uniform(-1, 1, 256).astype("float32") for _ in range(2))
    c = np.zeros(256, "float32")
    import time
    t = time.perf_counter()
    r = mod.time_evaluator(number=1, repeat=3, min_repeat_ms=20)(a, b, c)
    elapsed = time.perf_counter() - t
    assert elapsed >= 0.05  # three repeats of at least 20 ms each
    assert r.median < 1e-3  # but each result is per call


def test_module_exposes_source_and_args(mod):
    assert "C_kernel" in mod.source
    assert [x.name for x in mod.args] == ["A", "B", "C"]
    assert [x.written for x in mod.args] == [False, False, True]
    assert mod.source_path.exists()


@pytest.mark.cc
def test_a_compile_that_times_out_leaves_no_compiler_running():
    body = "\n".join(f"  x[{i % 97}] = x[{(i * 7) % 97}] * 1.0001f + {i}.0f;" for i in range(60000))
    source = f"void slow(float* x) {{\n{body}\n}}\n// {os.getpid()} {id(body)}\n"
    with pytest.raises(BuildError, match="longer than"):
        compile_shared(source, name="too_slow_to_compile", timeout=0.5)
    time.sleep(0.2)
    left = []
    for pid in os.listdir("/proc"):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if b"too_slow_to_compile" in cmd:
            left.append(cmd.replace(b"\0", b" ")[:120])
    assert not left, left
