"""Artifacts that are safe to share (DESIGN contract 10): exported models and cached kernels
are written whole and renamed into place, carry a format version, the hashes of their parts
and the ISA they were built for, are refused with a clear error when any of these does not
match, and several processes may build and export the same thing at once. A damaged
artifact that slipped through would kill the process that loads it (SIGBUS, SIGSEGV), so
every risky load runs in a child process, and the test checks how the child ended."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from looptune.graph import GraphBuilder, ModelError, compile_model, evaluate, load
from test_graph import mlp, rand

pytestmark = pytest.mark.cc

ROOT = Path(__file__).resolve().parent.parent
TOL = dict(rtol=1e-3, atol=1e-3)


def child_env(cache=None) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    if cache is not None:
        env["LOOPTUNE_CACHE_DIR"] = str(cache)
    return env


def python(code: str, *args, cache=None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=child_env(cache))


# loads a model and runs it on x: prints "ran" (and saves y) or the ModelError it raised
LOAD = """
import sys, numpy as np, looptune
from looptune.graph import ModelError
try:
    m = looptune.load(sys.argv[1])
except ModelError as e:
    print("ModelError:", e)
    sys.exit(0)
np.save(sys.argv[3], m(np.load(sys.argv[2])))
print("ran")
"""


def library_of(path: Path) -> Path:
    (lib,) = path.glob("*.so")
    return lib


def chain(size=16):
    g = GraphBuilder("chain")
    x = g.input("x", (size, size))
    w = g.const("w", rand(size, size))
    return g.finish(g.op("relu", g.op("matmul", x, w)))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two models of the same interface (mlp, other weights), one of another (chain), each
    exported once; tests copy the directories they damage."""
    root = tmp_path_factory.mktemp("models")
    out, xs = {}, {}
    for key, graph in (("a", mlp(seed=0)), ("b", mlp(seed=1)), ("c", chain())):
        shape = graph.inputs[0].shape
        x = xs.setdefault(shape, rand(*shape))  # a and b: the same input
        compile_model(graph, None, "cpu", num_threads=1).export(root / key)
        np.save(root / f"{key}_x.npy", x)
        out[key] = (root / key, x, evaluate(graph, x)[0])
    return out


def copy_model(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        if not f.name.startswith("."):
            (dst / f.name).write_bytes(f.read_bytes())
    return dst


def load_in_child(path: Path, x, tmp_path: Path) -> subprocess.CompletedProcess:
    np.save(tmp_path / "in.npy", x)
    out = python(LOAD, path, tmp_path / "in.npy", tmp_path / "out.npy")
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])  # no signal, no traceback
    return out


def assert_refused(path: Path, x, tmp_path: Path, match: str) -> str:
    out = load_in_child(path, x, tmp_path)
    assert out.stdout.startswith("ModelError:"), out.stdout
    assert "export" in out.stdout, out.stdout  # says how to fix it
    import re
    assert re.search(match, out.stdout), out.stdout
    return out.stdout


def test_an_exported_model_loads_in_a_fresh_process_and_records_its_parts(models, tmp_path):
    path, x, want = models["a"]
    out = load_in_child(path, x, tmp_path)
    assert out.stdout.strip() == "ran", out.stdout
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), want, **TOL)
    desc = json.loads((path / "model.json").read_text())
    from looptune.graph.executor import FORMAT_VERSION
    from looptune.runtime.files import sha256_file
    from looptune.target import host
    assert desc["format"] == FORMAT_VERSION
    assert desc["library"]["sha256"] == sha256_file(library_of(path))
    assert desc["library"]["file"] == library_of(path).name
    assert desc["isa"] == host().isa()
    assert len(desc["hash"]) == 64


def test_a_truncated_library_is_refused(models, tmp_path):
    path, x, _ = models["a"]
    broken = copy_model(path, tmp_path / "m")
    lib = library_of(broken)
    data = lib.read_bytes()
    lib.write_bytes(data[:len(data) // 2])  # what a SIGKILL in the middle of a copy leaves
    assert_refused(broken, x, tmp_path, r"model-\w+\.so.*does not match")


@pytest.mark.parametrize("other", ["b", "c"])
def test_a_library_of_another_model_is_refused(models, tmp_path, other):
    path, x, _ = models["a"]
    broken = copy_model(path, tmp_path / "m")
    library_of(broken).write_bytes(library_of(models[other][0]).read_bytes())
    assert_refused(broken, x, tmp_path, r"does not match")
    # the hash of the library edited to match: the library's own description still differs
    desc = json.loads((broken / "model.json").read_text())
    from looptune.runtime.files import sha256_file
    desc["library"]["sha256"] = sha256_file(library_of(broken))
    (broken / "model.json").write_text(json.dumps(desc))
    assert_refused(broken, x, tmp_path, r"belongs to another model|does not match")


def test_an_edited_shape_is_refused_even_with_its_hash_edited_too(models, tmp_path):
    path, x, _ = models["c"]
    broken = copy_model(path, tmp_path / "m")
    desc = json.loads((broken / "model.json").read_text())
    desc["inputs"][0]["shape"] = [64, 64]
    (broken / "model.json").write_text(json.dumps(desc))
    big = rand(64, 64)
    assert_refused(broken, big, tmp_path, r"model\.json was edited")
    from looptune.graph.executor import semantic_hash
    desc["hash"] = semantic_hash(desc)
    (broken / "model.json").write_text(json.dumps(desc))
    assert_refused(broken, big, tmp_path, r"belongs to another model")


@pytest.mark.parametrize("damage", [
    "truncated", "not json", "a list", "no inputs", "no library", "no format", "shape text",
    "negative shape", "library elsewhere", "no isa", "dtype unknown"])
def test_a_damaged_description_is_refused_with_a_clear_error(models, tmp_path, damage):
    path, _, _ = models["a"]
    broken = copy_model(path, tmp_path / "m")
    text = (broken / "model.json").read_text()
    desc = json.loads(text)
    edits = {
        "truncated": lambda: text[:len(text) // 2],
        "not json": lambda: "\x00\x01 garbage",
        "a list": lambda: "[1, 2]",
        "no inputs": lambda: json.dumps({k: v for k, v in desc.items() if k != "inputs"}),
        "no library": lambda: json.dumps({k: v for k, v in desc.items() if k != "library"}),
        "no format": lambda: json.dumps({k: v for k, v in desc.items() if k != "format"}),
        "shape text": lambda: json.dumps({**desc, "inputs": [{**desc["inputs"][0],
                                                              "shape": "1x784"}]}),
        "negative shape": lambda: json.dumps({**desc, "inputs": [{**desc["inputs"][0],
                                                                  "shape": [1, -784]}]}),
        "library elsewhere": lambda: json.dumps({**desc, "library": {
            **desc["library"], "file": "../../lib/evil.so"}}),
        "no isa": lambda: json.dumps({k: v for k, v in desc.items() if k != "isa"}),
        "dtype unknown": lambda: json.dumps({**desc, "outputs": [{**desc["outputs"][0],
                                                                  "dtype": "float3"}]}),
    }
    (broken / "model.json").write_text(edits[damage]())
    with pytest.raises(ModelError, match=r"model\.json.*export") as e:
        load(broken)
    assert str(broken) in str(e.value)


def test_a_model_for_an_isa_this_machine_lacks_is_refused(models, tmp_path):
    from looptune.target import host
    path, x, _ = models["a"]
    missing = next(f for f in ("avx512_fp16", "amx_tile", "avx512f", "avx2", "sve2")
                   if not host().has(f))
    broken = copy_model(path, tmp_path / "m")
    desc = json.loads((broken / "model.json").read_text())
    desc["isa"]["features"].append(missing)
    (broken / "model.json").write_text(json.dumps(desc))
    assert_refused(broken, x, tmp_path, f"built for {missing}, which this machine .* lacks")


def test_an_old_export_asks_to_be_exported_again(models, tmp_path):
    broken = copy_model(models["a"][0], tmp_path / "m")
    desc = json.loads((broken / "model.json").read_text())
    (broken / "model.json").write_text(json.dumps({**desc, "format": 2}))
    with pytest.raises(ModelError, match="format 2.*export it again"):
        load(broken)


# loads a model, says so, and calls it until told to stop, checking every answer
HOLDER = """
import sys, time, numpy as np, looptune
from pathlib import Path
m = looptune.load(sys.argv[1])
x, want, stop = np.load(sys.argv[2]), np.load(sys.argv[3]), Path(sys.argv[4])
print("loaded", flush=True)
calls = 0
while not stop.exists() or calls < 10:
    np.testing.assert_allclose(m(x), want, rtol=1e-3, atol=1e-3)
    calls += 1
print("calls", calls)
"""


def test_exporting_over_a_model_another_process_runs_leaves_it_running(models, tmp_path):
    (_, x, want_a), (_, _, want_b) = models["a"], models["b"]
    a, b = (compile_model(mlp(seed=s), None, "cpu", num_threads=1) for s in (0, 1))
    path = a.export(tmp_path / "m")
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "want.npy", want_a)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), str(tmp_path / "x.npy"),
         str(tmp_path / "want.npy"), str(tmp_path / "stop")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
    try:
        assert holder.stdout.readline().strip() == "loaded"
        for i in range(6):  # the other model, then this one again, over the running one
            (b if i % 2 == 0 else a).export(path)
        (tmp_path / "stop").touch()
        out, err = holder.communicate(timeout=120)
    finally:
        holder.kill()
    assert holder.returncode == 0, (holder.returncode, err[-2000:])
    first = load(path)  # in this process too: a model loaded before an export keeps running,
    b.export(path)      # and a load after it gets the new model (not the library loaded before)
    np.testing.assert_allclose(load(path)(x), want_b, **TOL)
    np.testing.assert_allclose(first(x), want_a, **TOL)


# exports model a and model b to one path, by turns, until killed
EXPORTER = """
import sys
from test_graph import mlp
from looptune.graph import compile_model
models = [compile_model(mlp(seed=s), None, "cpu", num_threads=1) for s in (0, 1)]
print("ready", flush=True)
i = 0
while True:
    models[i % 2].export(sys.argv[1])
    i += 1
"""


def test_an_export_killed_at_any_moment_leaves_a_model_that_loads(models, tmp_path):
    (_, x, want_a), (_, _, want_b) = models["a"], models["b"]
    path = tmp_path / "m"
    rng = np.random.default_rng(0)
    for kill in range(4):
        proc = subprocess.Popen([sys.executable, "-c", EXPORTER, str(path)],
                                stdout=subprocess.PIPE, text=True, env=child_env())
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.05 + rng.uniform(0, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        out = load_in_child(path, x, tmp_path)
        assert out.stdout.strip() == "ran", (kill, out.stdout)
        y = np.load(tmp_path / "out.npy")
        assert np.allclose(y, want_a, **TOL) or np.allclose(y, want_b, **TOL), kill


# waits for the start signal, compiles the mlp, checks it, exports it to a shared path
COMPILER = """
import sys, time, numpy as np
from pathlib import Path
from test_graph import mlp
from looptune.graph import compile_model, load
go, x, want = Path(sys.argv[1]), np.load(sys.argv[2]), np.load(sys.argv[3])
while not go.exists():
    time.sleep(0.002)
m = compile_model(mlp(), None, "cpu", num_threads=1)
np.testing.assert_allclose(m(x), want, rtol=1e-3, atol=1e-3)
m.export(sys.argv[4])
np.testing.assert_allclose(load(sys.argv[4])(x), want, rtol=1e-3, atol=1e-3)
print("ok")
"""


def test_processes_compiling_and_exporting_one_model_on_a_cold_cache_agree(models, tmp_path):
    _, x, want = models["a"]
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "want.npy", want)
    for round_ in range(2):
        cache, go = tmp_path / f"cache{round_}", tmp_path / f"go{round_}"
        procs = [subprocess.Popen(
            [sys.executable, "-c", COMPILER, str(go), str(tmp_path / "x.npy"),
             str(tmp_path / "want.npy"), str(tmp_path / f"export{round_}")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(cache))
            for _ in range(4)]  # the soak: four processes at once
        time.sleep(2.0)  # all four have imported looptune
        go.touch()
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0 and out.strip() == "ok", (round_, p.returncode,
                                                                err[-3000:])
        np.testing.assert_allclose(load(tmp_path / f"export{round_}")(x), want, **TOL)
        assert not list((tmp_path / f"export{round_}").glob("*.tmp"))


# builds a kernel (from the cache where it is there) and checks it
KERNEL = """
import numpy as np
from looptune import te
from looptune.backend import Backend
n = 4096
A = te.placeholder((n,), name="A")
B = te.compute((n,), lambda i: A[i] * 3.0 + 1.0, name="B")
mod = Backend.for_target("cpu").build(te.create_prim_func([A, B]), name="triple", num_threads=1)
a = np.random.default_rng(1).uniform(-1, 1, n).astype("float32")
b = np.empty_like(a)
mod(a, b)
np.testing.assert_allclose(b, a * 3 + 1, rtol=1e-5, atol=1e-6)
print(mod.lib_path)
"""


@pytest.mark.parametrize("part", [".so", ".o"])
def test_a_damaged_cached_kernel_is_rebuilt(tmp_path, part):
    cache = tmp_path / "cache"
    first = python(KERNEL, cache=cache)
    assert first.returncode == 0, first.stderr[-2000:]
    lib = Path(first.stdout.strip())
    damaged = lib.with_suffix(part)
    data = damaged.read_bytes()
    damaged.write_bytes(data[:len(data) // 3])
    again = python(KERNEL, cache=cache)
    assert again.returncode == 0, (again.returncode, again.stderr[-2000:])
    assert damaged.read_bytes() == data  # built again, whole


def test_loading_a_damaged_cached_library_by_path_is_refused(tmp_path):
    cache = tmp_path / "cache"
    first = python(KERNEL, cache=cache)
    assert first.returncode == 0, first.stderr[-2000:]
    lib = Path(first.stdout.strip())
    lib.write_bytes(lib.read_bytes()[:4096])
    code = ("import sys\nfrom looptune.runtime import Module\nfrom looptune.error import "
            "BuildError\ntry:\n    Module(sys.argv[1], 'triple', [], '')\nexcept BuildError "
            "as e:\n    print('BuildError:', e)\n")
    out = python(code, lib, cache=cache)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert "BuildError:" in out.stdout and "does not match" in out.stdout, out.stdout
