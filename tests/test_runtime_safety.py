"""Runtime safety: one compiled model called from many threads at once, thread counts from
records, JSON and arguments, memory limits checked up front, and child processes (compilers,
workers) that die with their parent."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import looptune as lt
from looptune import te
from looptune.backend.base import Backend
from looptune.graph import GraphBuilder, ModelError, compile_model, load
from looptune.runtime import BuildError, RunError
from looptune.backend.cpu import CPUBackend
from looptune.tune import tune_tir
from looptune.tune.error import TuneError

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------ one model, many threads
def mlp3(seed=0, batch=16, width=128):
    """relu(relu(x @ w0) @ w1) @ w2, and its numpy twin."""
    r = np.random.default_rng(seed)
    ws = [r.uniform(-0.2, 0.2, (width, width)).astype("float32") for _ in range(3)]
    g = GraphBuilder("mlp3")
    h = x = g.input("x", (batch, width))
    for i, w in enumerate(ws):
        h = g.op("matmul", h, g.const(f"w{i}", w))
        if i < 2:
            h = g.op("relu", h)
    graph = g.finish(h)

    def reference(a):
        a = np.maximum(a @ ws[0], 0)
        return np.maximum(a @ ws[1], 0) @ ws[2]
    return graph, reference, x.shape


@pytest.fixture(scope="module")
def model():
    graph, reference, shape = mlp3()
    return compile_model(graph, None, "cpu", num_threads=1), reference, shape


def hammer(model, threads: int, calls: int):
    compiled, reference, shape = model
    wrong, errors = [], []

    def work(seed):
        r = np.random.default_rng(seed)
        try:
            for i in range(calls):
                x = r.uniform(-1, 1, shape).astype("float32")
                y = compiled(x)
                if not np.allclose(y, reference(x), rtol=1e-4, atol=1e-4):
                    wrong.append((seed, i))
        except Exception as e:  # surfaces below, with the thread's seed
            errors.append((seed, e))
    pool = [threading.Thread(target=work, args=(100 + s,)) for s in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors, errors
    assert not wrong, f"{len(wrong)} of {threads * calls} calls returned another call's result"


@pytest.mark.cc
def test_one_model_called_from_eight_threads_gives_every_caller_its_own_result(model):
    hammer(model, threads=8, calls=200)
    assert model[0].arenas >= 2  # calls ran at once, each on its own arena


@pytest.mark.cc
@pytest.mark.slow
def test_soak_one_model_from_eight_threads(model):
    hammer(model, threads=8, calls=1000)


@pytest.mark.cc
def test_a_model_call_lets_other_threads_run():
    graph, reference, shape = mlp3(batch=256, width=512)
    compiled = compile_model(graph, None, "cpu", num_threads=1)
    x = np.random.default_rng(1).uniform(-1, 1, shape).astype("float32")
    compiled(x)
    count, stop = [0], threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1
    t = threading.Thread(target=spin)
    t.start()
    try:
        t0 = time.perf_counter()
        during = count[0]
        while time.perf_counter() - t0 < 0.3:  # calls in a loop: a Python instant in between
            y = compiled(x)
        during = count[0] - during
    finally:
        stop.set()
        t.join()
    np.testing.assert_allclose(y, reference(x), rtol=1e-4, atol=1e-4)
    assert during > 10_000  # the spinning thread ran while the model did


# ------------------------------------------------------------------ thread counts
def parallel_add(n=4096):
    A, B = te.placeholder((n,), name="A"), te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] * B[i] + A[i], name="C")
    sch = lt.Schedule(te.create_prim_func([A, B, C]))
    (i,) = sch.get_loops(sch.get_block("C"))
    o, _ = sch.split(i, [8, None])
    sch.parallel(o)
    return sch


def run_python(code: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=env, **kw)


@pytest.mark.cc
def test_a_billion_threads_are_clamped_to_the_machine_with_one_warning(tmp_path):
    # in a child: before the clamp, libgomp ended the process ("Out of memory allocating
    # 224000001344 bytes")
    graph, _, _ = mlp3()
    compile_model(graph, None, "cpu", num_threads=1).export(tmp_path / "m.lt")
    desc = json.loads((tmp_path / "m.lt" / "model.json").read_text())
    desc["num_threads"] = 1e9  # JSON's 1e9 is a float
    (tmp_path / "m.lt" / "model.json").write_text(json.dumps(desc))
    code = f"""
import os, warnings, numpy as np, looptune as lt
from test_runtime_safety import parallel_add, mlp3
warnings.simplefilter("always")
cpus = os.cpu_count()
r = np.random.default_rng(0)
a, b = (r.uniform(-1, 1, 4096).astype("float32") for _ in range(2))
with warnings.catch_warnings(record=True) as w:
    mod = lt.build(parallel_add(), num_threads=10**9)
assert len(w) == 1 and "num_threads argument" in str(w[0].message), [str(x.message) for x in w]
assert mod.num_threads == cpus, mod.num_threads
c = np.zeros(4096, "float32"); mod(a, b, c)
np.testing.assert_allclose(c, a * b + a, rtol=1e-5, atol=1e-6)
with warnings.catch_warnings(record=True) as w:
    m = lt.load({str(tmp_path / "m.lt")!r})
assert len(w) == 1 and "model.json" in str(w[0].message), [str(x.message) for x in w]
assert m.num_threads == cpus
_, reference, shape = mlp3()
x = r.uniform(-1, 1, shape).astype("float32")
np.testing.assert_allclose(m(x), reference(x), rtol=1e-4, atol=1e-4)
print("ok")
"""
    out = run_python(code)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


@pytest.mark.cc
@pytest.mark.parametrize("bad", [0, -3, 2.5, "4", True, float("nan")])
def test_thread_counts_that_are_not_whole_positive_numbers_are_refused(bad):
    mod = lt.build(parallel_add())
    with pytest.raises(RunError, match=r"thread count from set_num_threads \(C_kernel\) must be "
                                       r"a whole number >= 1"):
        mod.set_num_threads(bad)
    with pytest.raises(RunError, match="from the num_threads argument"):
        lt.build(parallel_add(), num_threads=bad)


# ------------------------------------------------------------------ memory limits
def matmul(n):
    A, B = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


@pytest.fixture
def nothing_is_built(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("code was generated or compiled for what does not fit")
    for cls in (Backend, CPUBackend):
        for name in ("generate", "compile", "link"):
            if name in vars(cls):
                monkeypatch.setattr(cls, name, refuse)


def test_a_kernel_larger_than_memory_is_refused_before_it_is_built(nothing_is_built):
    with pytest.raises(BuildError, match=r"the kernel C needs 1.12e\+04 GiB of memory, more "
                                         r"than this machine's .* GiB \(the largest part: "
                                         r"tensor A \(1000000, 1000000\) float32"):
        lt.build(matmul(10**6))


def test_a_tensor_whose_size_overflows_int64_is_refused(nothing_is_built):
    X = te.placeholder((2**40, 2**40), name="X")
    Y = te.compute((2**40, 2**40), lambda i, j: X[i, j] * 2, name="Y")
    with pytest.raises(BuildError, match=r"tensor X has shape \(1099511627776, 1099511627776\)"
                                         r": 1208925819614629174706176 elements .* overflow int64"):
        lt.build(te.create_prim_func([X, Y]))


def test_tuning_a_kernel_larger_than_memory_is_refused_up_front(tmp_path, nothing_is_built):
    with pytest.raises(TuneError, match=r"task C: the kernel C needs .* GiB of memory"):
        tune_tir(matmul(10**6), "cpu", tmp_path, max_trials_global=4, progress=False)


def big_model(n):
    g = GraphBuilder("big")
    x, y = g.input("x", (n, n)), g.input("y", (n, n))
    return g.finish(g.op("matmul", g.op("relu", g.op("matmul", x, y)), y))


def test_a_model_larger_than_memory_is_refused_before_anything_compiles(nothing_is_built):
    with pytest.raises(ModelError, match=r"the model big needs .* GiB of memory, more than this "
                                         r"machine's .* \(the largest part: tensor \w+ "
                                         r"\(1000000, 1000000\) float32"):
        compile_model(big_model(10**6), None, "cpu")


def test_a_model_tensor_whose_size_overflows_int64_is_refused(nothing_is_built):
    with pytest.raises(ModelError, match=r"the model big: tensor \w+ has shape "
                                         r"\(4294967296, 4294967296\): .* overflow int64"):
        compile_model(big_model(2**32), None, "cpu")


@pytest.mark.cc
def test_an_exported_model_whose_arena_cannot_fit_is_refused_on_load(tmp_path, model):
    compiled, reference, shape = model
    path = compiled.export(tmp_path / "m.lt")
    x = np.random.default_rng(2).uniform(-1, 1, shape).astype("float32")
    np.testing.assert_allclose(load(path)(x), reference(x), rtol=1e-4, atol=1e-4)
    desc = json.loads((path / "model.json").read_text())
    desc["arena_bytes"] = 2**62
    (path / "model.json").write_text(json.dumps(desc))
    with pytest.raises(ModelError, match="edited after export"):  # its hash says so first
        load(path)
    # a description consistent with itself (as one built for a bigger machine would be):
    # the memory check refuses it before the library is loaded
    from looptune.graph.executor import semantic_hash
    desc["hash"] = semantic_hash(desc)
    (path / "model.json").write_text(json.dumps(desc))
    with pytest.raises(ModelError, match=r"the model mlp3 needs .* GiB of memory.*the arena of "
                                         r"intermediates"):
        load(path)


# ------------------------------------------------------------------ child processes
def marked(mark: str) -> list:
    """Pids of processes whose command line holds `mark`."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if mark.encode() in cmd and not zombie:
            pids.append(int(pid))
    return pids


def wait_until(cond, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


@pytest.fixture
def mark():
    """A unique number to find the processes of one test by (`sleep <mark>`), and the
    clean-up of whatever it leaves."""
    m = f"{1000 + os.getpid() % 1000}.{time.time_ns() % 10**9:09d}"
    yield m
    for pid in marked(m):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture
def slow_cc(tmp_path, mark):
    """A C compiler that answers --version and then, like gcc starting cc1, starts a child
    (`sleep <mark>`) and waits for it."""
    cc = tmp_path / "slowcc"
    cc.write_text(f"""#!/bin/sh
case "$*" in
  *--version*) echo "slowcc 1.0"; exit 0 ;;
  *--help=target*|*-dM*) exit 0 ;;
esac
sleep {mark}
""")
    cc.chmod(0o755)
    return cc


COMPILES = {  # one compile in the calling thread; two units of a library in other threads
    "shared": "from looptune.runtime import compile_shared as c; c('int f(void) { return 1; }')",
    "library": "from looptune.runtime.compiler import compile_library as c; "
               "c([('a.c', 'int a(void) { return 1; }', []), ('b.c', 'int b(void) { return 2; }', [])])",
}


def start_compile(slow_cc, tmp_path, mark, what="shared") -> subprocess.Popen:
    # Ctrl-C as at a terminal, also where this test runs in a background job (which starts
    # with SIGINT ignored, and a Python started so keeps it ignored)
    code = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
            f"import os; os.environ['CC'] = {str(slow_cc)!r}; "
            f"os.environ['LOOPTUNE_CACHE_DIR'] = {str(tmp_path / 'cache')!r}; "
            f"{COMPILES[what]}  # {mark}")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    # the parent's own command line holds the mark too: wait for the compiler's child
    assert wait_until(lambda: set(marked(mark)) - {parent.pid}, 60), marked(mark)
    return parent


@pytest.mark.parametrize("how,what", [("SIGKILL", "shared"), ("SIGINT", "shared"),
                                      ("SIGKILL", "library"), ("SIGINT", "library")])
def test_a_compile_dies_with_its_parent(slow_cc, tmp_path, mark, how, what):
    """SIGKILL: PR_SET_PDEATHSIG kills the driver, the reaper its group (the driver's child);
    SIGINT (Ctrl-C): the parent kills the groups (of other threads' compiles too) before
    KeyboardInterrupt leaves it."""
    parent = start_compile(slow_cc, tmp_path, mark, what)
    parent.send_signal(getattr(signal, how))
    _, err = parent.communicate(timeout=30)
    assert parent.returncode != 0
    if how == "SIGINT":
        assert "KeyboardInterrupt" in err
    assert wait_until(lambda: not marked(mark), 5), "left running: " + ", ".join(
        open(f"/proc/{p}/cmdline").read().replace("\0", " ") for p in marked(mark))


def test_ctrl_c_also_kills_a_compiler_that_starts_just_after_the_first_kill(mark):
    """The race behind a Ctrl-C that hung compile_library: another thread was still starting
    its compiler when the main thread killed the running ones, and the pool's exit waited for
    that compiler to finish. Compiles.stop kills it as soon as it is registered."""
    from concurrent.futures import ThreadPoolExecutor
    from looptune.runtime import process
    started = threading.Event()
    compiles = process.Compiles()

    def late_compile():
        started.set()
        time.sleep(0.3)  # still starting when the first kill runs
        return process.run(["sleep", mark]).returncode

    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(compiles.guard(late_compile))
        started.wait()
        try:
            compiles.stop(timeout=20)
            assert future.done()
            assert future.result() == -9  # SIGKILLed, not run to the end
        finally:  # a failing run must not leave the pool waiting for `sleep`
            time.sleep(0.5)
            for pid in marked(mark):
                os.kill(pid, signal.SIGKILL)
    assert not marked(mark)


def test_after_ctrl_c_a_compile_the_pool_picks_up_does_not_start(mark):
    """A compile queued while Ctrl-C arrived, whose future the caller may never have seen
    (Ctrl-C inside `submit`), must not begin once the caller has stopped."""
    from concurrent.futures import ThreadPoolExecutor
    from looptune.runtime import process
    compiles = process.Compiles()
    compiles.stop()
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(compiles.guard(lambda: process.run(["sleep", mark]).returncode))
        with pytest.raises(KeyboardInterrupt):
            future.result(timeout=20)
    assert not marked(mark)


def test_ctrl_c_while_compile_library_submits_leaves_nothing_running(slow_cc, tmp_path, mark):
    """Ctrl-C in compile_library after the first unit's compiler started and before the
    other units were all submitted (it was outside the try that kills them, and the pool's
    exit waited for that compiler: a hung Ctrl-C, seen in CI)."""
    code = f"""
import os, time
os.environ['CC'] = {str(slow_cc)!r}
os.environ['LOOPTUNE_CACHE_DIR'] = {str(tmp_path / 'cache')!r}
from concurrent.futures import ThreadPoolExecutor
submit, calls = ThreadPoolExecutor.submit, []
def interrupted_submit(self, *a, **k):
    calls.append(1)
    if len(calls) == 2:  # the first unit's compiler is running by now
        time.sleep(1.0)
        raise KeyboardInterrupt
    return submit(self, *a, **k)
ThreadPoolExecutor.submit = interrupted_submit
from looptune.runtime.compiler import compile_library
compile_library([('a.c', 'int a(void) {{ return 1; }}', []), ('b.c', 'int b(void) {{ return 2; }}', [])])
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        _, err = parent.communicate(timeout=30)
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
    assert parent.returncode != 0 and "KeyboardInterrupt" in err, err[-2000:]
    assert wait_until(lambda: not marked(mark), 5)


@pytest.mark.parametrize("thread", ["main", "other"])
def test_a_worker_child_dies_with_its_parent(mark, thread):
    """A child of start_child (a measurement worker's way to start) started from the main
    thread (PR_SET_PDEATHSIG) or another one that lives on (the reaper)."""
    code = f"""
import threading, time
from looptune.runtime.child import start_child
def start():
    start_child("import time; time.sleep({mark})")
    print("started", flush=True)
if {thread!r} == "main":
    start()
else:
    threading.Thread(target=start).start()
time.sleep(600)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    assert parent.stdout.readline().strip() == "started"
    child = [p for p in marked(mark) if p != parent.pid]
    assert child
    parent.kill()
    parent.wait()
    assert wait_until(lambda: not [p for p in marked(mark) if p != parent.pid], 5)
