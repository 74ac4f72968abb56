"""compile_model on a cuda target (graph/model_cuda.py), with no GPU: a fake driver whose
launches run the real lowered kernels thread by thread through the GPU interpreter, on the
device memory the CudaModel lays out (weights blob, intermediates arena, staged inputs and
outputs). So the model's wiring - which address each kernel gets, in which order - is
checked against numpy's result of the graph. On a GPU, the `gpu` test runs it for real."""
from __future__ import annotations

import ctypes
import hashlib

import numpy as np
import pytest
from fake_cuda import FakeDriver, install

from looptune.graph import GraphBuilder, compile_model, evaluate
from looptune.runtime.cuda import gpu_available
from looptune.target import cuda_target
from looptune.tir import dtype as dt
from looptune.tir.interpreter_gpu import run_kernel

TARGET = cuda_target("sm_80")


class InterpretingDriver(FakeDriver):
    """Modules are the GpuPrograms compiled (a token per source); a launch runs the kernel
    of that name through the interpreter on the memory at the addresses it is given."""

    def __init__(self, programs: dict):
        super().__init__({})
        self.programs = programs

    def cuModuleLoadData(self, ptr):
        return self.ok, ctypes.string_at(ptr).decode()

    def cuModuleGetFunction(self, module, name):
        return self.ok, (module, name.decode())

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        token, name = fn
        (kernel,) = [k for k in self.programs[token].kernels if k.name == name]
        assert (gx, gy, gz) == kernel.grid and (bx, by, bz) == kernel.block
        slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        memory = {}
        for i, b in enumerate(kernel.params):
            addr = ctypes.cast(slots[i], ctypes.POINTER(ctypes.c_uint64))[0]
            raw = (ctypes.c_char * (b.size * dt.nbytes(b.dtype))).from_address(addr)
            memory[b] = np.frombuffer(raw, dtype=dt.numpy_dtype(b.dtype))
        self.launches.append((name, addr))
        run_kernel(kernel, memory)
        return (self.ok,)


@pytest.fixture
def simulated_gpu(monkeypatch, tmp_path):
    import looptune.backend.cuda as bc
    import looptune.runtime.cuda_compile as cc
    import looptune.target.cuda_device as cd
    programs = {}
    real_compile_program = bc.compile_program

    def compile_program(program, source, *args, **kw):
        token = hashlib.sha1(source.encode()).hexdigest()
        programs[token] = program
        return real_compile_program(program, source, *args, **kw)

    def compile_cuda(source, *, name, **kw):
        path = tmp_path / f"{name}-{hashlib.sha1(source.encode()).hexdigest()[:12]}.cubin"
        path.write_bytes(hashlib.sha1(source.encode()).hexdigest().encode())
        return path

    monkeypatch.setattr(bc, "compile_program", compile_program)
    monkeypatch.setattr(bc, "compile_cuda", compile_cuda)
    monkeypatch.setattr(bc, "cuda_compiler", lambda compiler="auto": ("fake", "fake 1.0"))
    monkeypatch.setattr(cc, "compile_cuda", compile_cuda)
    drv = InterpretingDriver(programs)
    install(monkeypatch, drv)
    yield drv
    cd._driver_state.cache_clear()


def rand(*shape, seed=0):
    r = np.random.default_rng(seed + sum(shape))
    return (r.uniform(0.5, 1.5, shape) * r.choice([-1, 1], shape)).astype("float32")


def small_net():
    """matmul + bias + relu, a residual matmul (two intermediates alive at once), a reshape,
    layer_norm, a matmul, softmax; two outputs (one also read by a later kernel) and an
    input passed through."""
    g = GraphBuilder("small_net")
    x = g.input("x", (4, 24))
    h = g.op("relu", g.op("add", g.op("matmul", x, g.const("w1", rand(16, 24)),
                                      transpose_b=True), g.const("b1", rand(16))))
    h = g.op("add", h, g.op("matmul", h, g.const("w3", rand(16, 16))))
    h = g.op("reshape", h, shape=(8, 8))
    n = g.op("layer_norm", h, g.const("gamma", rand(8)), g.const("beta", rand(8)))
    y = g.op("softmax", g.op("matmul", n, g.const("w2", rand(8, 8, seed=1))))
    return g.finish(y, n, x)


def test_a_model_compiled_for_cuda_computes_the_graph(simulated_gpu):
    graph = small_net()
    model = compile_model(graph, target=TARGET)
    x = rand(4, 24, seed=3)
    want = evaluate(graph, x)
    got = model(x)
    assert len(got) == 3
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    launched = len(simulated_gpu.launches)
    assert launched >= model.desc["kernels"]  # every group's kernels ran on the "device"
    assert "small_net" in repr(model) and all(not t["tuned"] for t in model.desc["tasks"])
    # a second call reuses the device memory and gives the same result on new data
    x2 = rand(4, 24, seed=4)
    for g, w in zip(model(x2), evaluate(graph, x2), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert len(simulated_gpu.launches) == 2 * launched


def test_bad_inputs_to_a_cuda_model_say_what_is_wrong(simulated_gpu):
    model = compile_model(small_net(), target=TARGET)
    with pytest.raises(TypeError, match=r"takes 1 inputs \(x\), got 2"):
        model(rand(4, 24), rand(4, 24))
    with pytest.raises(ValueError, match=r"input x must have shape \(4, 24\)"):
        model(rand(4, 23))
    with pytest.raises(TypeError, match=r"input x must have dtype float32.*astype"):
        model(rand(4, 24).astype("float64"))


def test_profile_names_every_kernel(simulated_gpu):
    model = compile_model(small_net(), target=TARGET)
    rows = model.profile(rand(4, 24), repeat=2)
    assert rows and [r["output"] for r in rows] == [s["output"] for s in model.desc["steps"]]
    assert all(r["ms"] >= 0 for r in rows)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available()[0], reason="needs an NVIDIA GPU")
def test_a_model_runs_on_the_gpu():
    graph = small_net()
    model = compile_model(graph, target="cuda")
    x = rand(4, 24, seed=5)
    for g, w in zip(model(x), evaluate(graph, x), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
