"""The Backend (looptune/backend): one path lower -> render -> compile -> load per target
kind. Its compile cache keys on the Target's ISA, flags follow the Target, an artifact built
for an ISA this machine lacks is refused, and a model links each kernel's object as it was
compiled and verified (a tuned task's C is compiled twice: the reference and the kernel)."""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess

import numpy as np
import pytest

from looptune import te
from looptune.backend import Backend, CPUBackend
from looptune.backend.cpu import isa_flags
from looptune.error import BuildError
from looptune.runtime import compiler
from looptune.target import Target, TargetError, host
from looptune.target.target import detected

pytestmark = pytest.mark.cc
X86 = host().arch == "x86_64"


def axpy(n=1000):
    a = te.placeholder((n,), name="a")
    b = te.placeholder((n,), name="b")
    c = te.compute((n,), lambda i: a[i] * 3.0 + b[i], name="c")
    return te.create_prim_func([a, b, c], name="axpy")


def run(mod, n=1000):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n).astype("float32"), rng.standard_normal(n).astype("float32")
    c = np.zeros(n, "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a * 3 + b, rtol=1e-5, atol=1e-6)  # FMA rounds once


def narrower(t: Target) -> Target:
    """`t` without its widest vector extensions (AVX-512, or else AVX/AVX2/FMA): the same
    machine as a Target that differs only in ISA features."""
    drop = "avx512" if t.has("avx512f") else "avx"
    needs_avx = {"fma", "f16c", "vaes", "vpclmulqdq"}  # GCC's -m options for these imply AVX
    feats = tuple(f for f in t.features if not f.startswith(drop)
                  and (drop == "avx512" or f not in needs_avx))
    return dataclasses.replace(t, features=feats, vector_bits=256 if drop == "avx512" else 128)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOPTUNE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_backend_per_target_kind():
    assert isinstance(Backend.for_target("cpu"), CPUBackend)
    assert Backend.for_target("cuda").kind == "cuda"
    with pytest.raises(BuildError, match="unknown backend 'fpga'.*registered: cpu, cuda"):
        Backend.for_target(dataclasses.replace(host(), kind="fpga"))


def test_the_host_is_built_native_another_isa_with_its_own_flags():
    assert isa_flags(detected()) == ["-march=native", "-mtune=generic"]
    if X86 and detected().has("avx"):
        flags = isa_flags(narrower(detected()))
        assert "-march=native" not in flags and "-march=x86-64" in flags
        assert not any(f.startswith("-mavx512") for f in flags)


@pytest.mark.skipif(not X86, reason="-mtune is x86's")
def test_kernels_are_tuned_for_no_cpu_in_particular():
    """Tuned for the host (-march=native alone), GCC folds a register-starved tile's B loads
    into its FMAs: a Zen 3's tuning cost the best AVX2 matmul_add 23% (backend.cpu.isa_flags)."""
    targets = [detected()] + ([narrower(detected())] if detected().has("avx") else [])
    for t in targets:
        flags = CPUBackend(t).flags("gcc")
        tunes = [f for f in flags if f.startswith("-mtune=")]
        assert tunes == ["-mtune=generic"], (t, flags)
        march = [i for i, f in enumerate(flags) if f.startswith("-march=")]
        assert march and march[-1] < flags.index("-mtune=generic")


@pytest.mark.skipif(not X86, reason="the ISA names below are x86's")
def test_two_isas_are_two_cache_entries_and_the_narrower_has_no_wide_vectors(cache):
    wide, narrow = host(), narrower(host())
    assert wide.isa_fingerprint() != narrow.isa_fingerprint()
    mods = [Backend.for_target(t).build(axpy(), num_threads=1) for t in (wide, narrow)]
    for m in mods:
        run(m)
    libs = sorted((cache / "kernels").glob("axpy_*.so"))
    assert len(libs) == 2 and {str(m.lib_path) for m in mods} == {str(p) for p in libs}
    metas = [compiler.read_meta(m.lib_path) for m in mods]
    assert [m["isa"]["fingerprint"] for m in metas] == [wide.isa_fingerprint(),
                                                        narrow.isa_fingerprint()]
    # built again: the same two entries, nothing new
    Backend.for_target(narrow).build(axpy())
    assert len(list((cache / "kernels").glob("axpy_*.so"))) == 2
    objdump = shutil.which("objdump")
    if objdump:
        reg = "%zmm" if wide.has("avx512f") else "%ymm"
        asm = subprocess.run([objdump, "-d", str(mods[1].lib_path)], capture_output=True,
                             text=True).stdout
        assert reg not in asm  # the narrower target's code has no wide vectors


@pytest.fixture
def host_isa(monkeypatch):
    """Set LOOPTUNE_HOST_ISA for one test (host() is cached: cleared before and after)."""
    def set_to(value):
        monkeypatch.setenv("LOOPTUNE_HOST_ISA", value)
        host.cache_clear()
    yield set_to
    monkeypatch.delenv("LOOPTUNE_HOST_ISA", raising=False)
    host.cache_clear()


@pytest.mark.skipif(not (detected().has("avx2") and detected().has("fma")),
                    reason="narrowing to AVX2 needs a machine with AVX2 and FMA")
def test_the_host_narrowed_to_avx2_builds_and_runs_what_an_avx2_machine_gets(cache, host_isa):
    host_isa("avx2")
    t = Target.create("cpu")
    assert t.has("avx2") and t.has("fma") and t.vector_bits == 256 and t.vector_registers == 16
    assert not [f for f in t.features if f.startswith(("avx512", "amx"))]
    assert t.model == detected().model and t.cores == detected().cores
    if detected().has("avx512f"):  # -march=native would let GCC use AVX-512 anyway
        assert "-march=native" not in isa_flags(t) and "-mavx2" in isa_flags(t)
    mod = Backend.for_target("cpu").build(axpy(), num_threads=1)
    run(mod)
    assert "avx512f" not in compiler.read_meta(mod.lib_path)["isa"]["features"]
    objdump = shutil.which("objdump")
    if objdump:
        asm = subprocess.run([objdump, "-d", str(mod.lib_path)], capture_output=True,
                             text=True).stdout
        assert "%ymm" in asm and "%zmm" not in asm


def test_a_host_isa_looptune_cannot_narrow_to_is_refused(host_isa):
    host_isa("sse9")
    with pytest.raises(TargetError, match="LOOPTUNE_HOST_ISA='sse9' is not an ISA.*avx2"):
        Target.create("cpu")
    host_isa("native")
    assert Target.create("cpu") == detected()


@pytest.mark.skipif(not X86, reason="the ISA names below are x86's")
def test_an_artifact_for_an_isa_this_machine_lacks_is_refused(cache):
    missing = next((f for f in ("avx512_fp16", "amx_tile", "avx512f", "avx2")
                    if not host().has(f)), None)
    if missing is None:
        pytest.skip("this machine has every x86 extension the test could pretend to lack")
    alien = dataclasses.replace(host(), features=host().features + (missing,))
    backend = Backend.for_target(alien)
    artifact = backend.compile(backend.generate(axpy()))  # compiling for it is fine
    assert missing in compiler.read_meta(artifact.path)["isa"]["features"]
    with pytest.raises(BuildError, match=f"built for {missing}, which this machine .* lacks"):
        backend.load(artifact, [])
    # the same check guards a library loaded by path (a runner's worker, a copied cache)
    from looptune.runtime import Module
    with pytest.raises(BuildError, match="lacks; it is not loaded"):
        Module(artifact.path, artifact.symbol, [], "")


def test_a_cached_library_whose_description_does_not_match_is_rebuilt(cache):
    mod = Backend.for_target("cpu").build(axpy())
    meta_path = mod.lib_path.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "isa": {**meta["isa"], "features": ["bogus"]}}))
    again = Backend.for_target("cpu").build(axpy())
    assert again.lib_path == mod.lib_path
    assert compiler.read_meta(again.lib_path) == meta  # written anew, not trusted
    run(again)


def test_build_generate_source_and_the_backend_agree():
    from looptune.build import build, generate_source
    func, text = generate_source(axpy())
    assert text == Backend.for_target("cpu").generate(axpy()).text
    mod = build(axpy(), num_threads=1)
    assert mod.artifact.isa == host().isa() and mod.source == text
    run(mod)


def test_a_tuned_task_is_compiled_twice_in_a_model_the_reference_and_the_kernel(
        cache, monkeypatch):
    """compile_model compiles a tuned task's C once as the kernel (verified as it is, then
    linked into the model as the same object) and once as the unscheduled reference."""
    from looptune.dlight import default_schedule
    from looptune.graph import GraphBuilder, compile_model, evaluate, extract_tasks
    from looptune.tune import MemoryDatabase, TuningRecord
    rng = np.random.default_rng(1)
    g = GraphBuilder("one")
    x = g.input("x", (32, 48))
    y = g.op("relu", g.op("matmul", x, g.const("w", rng.standard_normal((48, 16))
                                                        .astype("float32"))))
    graph = g.finish(y)
    (task,) = extract_tasks(graph)
    db = MemoryDatabase()
    wl = db.commit_workload(task.func)
    trace = default_schedule(task.func, host()).trace
    db.commit_tuning_record(TuningRecord(wl, trace, (1e-4, 1e-4), host(),
                                         measure={"num_threads": 1}))
    compiles, links = [], []
    real = compiler._run_cc

    def counting(cmd, what, timeout, cwd=None):
        sources = [a for a in cmd if a.endswith((".c", ".S"))]
        (compiles if sources else links).append(sources or cmd)
        return real(cmd, what, timeout, cwd)
    monkeypatch.setattr(compiler, "_run_cc", counting)
    compiled = compile_model(graph, db, "cpu", num_threads=1)
    assert [t["tuned"] for t in compiled.desc["tasks"]] == [True]
    helpers = ("lt_model.c", "lt_weights.S", "lt_call", "lt_timer")
    kernels = [src for (src,) in compiles if not any(h in src for h in helpers)]
    assert len(kernels) == 2, compiles  # the reference and the kernel
    (model_link,) = [cmd for cmd in links if any("model_one" in a for a in cmd)]
    linked = [a for a in model_link if a.endswith(".o") and not any(
        h.split(".")[0] in a for h in helpers)]
    assert len(linked) == 1 and linked[0] in [k.removesuffix(".c") + ".o" for k in kernels]
    xv = rng.standard_normal((32, 48)).astype("float32")
    np.testing.assert_allclose(compiled(xv), evaluate(graph, xv)[0], rtol=1e-4, atol=1e-4)
