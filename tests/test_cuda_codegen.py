"""CUDA: the renderer's output on hand-built GPU programs (pure Python), compiling it (nvcc,
NVRTC: no GPU needed), the pieces of the runtime and of Target detection that need no device,
and, marked gpu, running programs on the device against numpy."""
from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from fake_cuda import FakeDriver, floats, install

from looptune.backend.cuda import compile_program
from looptune.codegen import CRenderer, CStyleRenderer, c_comment, render_c  # noqa: F401
from looptune.codegen.cuda import CUDARenderer, launch_table, render_cuda
from looptune.codegen.gpu import GpuProgram, Kernel
from looptune.codegen.gpu.examples import tiled_matmul
from looptune.codegen.passes import vectorize_loops
from looptune.runtime.error import BuildError, RunError
from looptune.target import Target, cuda_device, cuda_target
from looptune.target.target import cuda_target_from_device
from looptune.tir import dtype as dt
from looptune.tir.buffer import Buffer
from looptune.tir.expr import BufferLoad, Var, binary, call, cast, const, select
from looptune.tir.func import PrimFunc
from looptune.tir.stmt import BufferStore, For

HAVE_NVCC = shutil.which("nvcc") is not None


# ------------------------------------------------------------------------------ programs
def ld(buf, idx):
    return BufferLoad(buf, (idx,), buf.dtype)


def elementwise(dtype="float32", *, n=1024, threads=32, lanes=1, offset=0, fn=None,
                extent=None, vector_bits=128, name="ew"):
    """C[i + offset] = fn(A[i + offset], B[i + offset]) with i = (bx * threads + tx) * lanes +
    v, the v loop vectorized (by the vectorize pass) when lanes > 1. `extent` < threads: the
    threadIdx loop is shorter than the block (a guard)."""
    size = n + offset
    A, B, C = (Buffer(x, (size,), dtype) for x in "ABC")
    bx, tx, v = Var("bx"), Var("tx"), Var("v")
    per_block = threads * lanes
    i = binary("+", binary("*", bx, const(per_block)), binary("*", tx, const(lanes)))
    if lanes > 1:
        i = binary("+", i, v)
    at = binary("+", i, const(offset)) if offset else i
    fn = fn or (lambda a, b: binary("+", binary("*", a, b), a))
    args = (ld(A, at), ld(B, at), tx)[:fn.__code__.co_argcount]
    body = BufferStore(C, fn(*args), (at,))
    if lanes > 1:
        body = For(v, lanes, "vectorized", body)
    body = For(bx, n // per_block, "thread_binding",
               For(tx, extent or threads, "thread_binding", body, "threadIdx.x"), "blockIdx.x")
    if lanes > 1:
        body = vectorize_loops(body, vector_bits)
    func = PrimFunc(name, (A, B, C), body)
    k = Kernel(f"{name}_kernel0", body, (A, B, C), (n // per_block, 1, 1), (threads, 1, 1))
    return GpuProgram(func, (k,))


def big_shared(floats=16384):
    """One block copies A through a shared array of `floats` floats (64 KB: dynamic)."""
    A, C = Buffer("A", (floats,), "float32"), Buffer("C", (floats,), "float32")
    S = Buffer("S", (floats,), "float32", "shared")
    tx, j = Var("tx"), Var("j")
    idx = binary("+", binary("*", j, const(256)), tx)
    from looptune.tir.stmt import barrier, seq
    body = For(tx, 256, "thread_binding", seq(
        For(j, floats // 256, "serial", BufferStore(S, ld(A, idx), (idx,))), barrier(),
        For(j, floats // 256, "serial", BufferStore(C, ld(S, idx), (idx,)))), "threadIdx.x")
    func = PrimFunc("big_shared", (A, C), body)
    return GpuProgram(func, (Kernel("big_shared_kernel0", body, (A, C), (1, 1, 1), (256, 1, 1),
                                    (S,)),))


def signature(src: str, name: str) -> str:
    m = re.search(rf'^extern "C" __global__ .*\b{name}\(.*$', src, re.M)
    assert m, src
    return m.group(0)


# ------------------------------------------------------------------------------ renderer
def test_tiled_matmul_kernel():
    src = render_cuda(tiled_matmul(), meta={"workload": "abc123", "target": "cuda(sm_90)",
                                            "trace": "7 instructions"})
    assert signature(src, "tiled_matmul_kernel0") == (
        'extern "C" __global__ void __launch_bounds__(64) tiled_matmul_kernel0('
        "const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C) {")
    assert "__shared__ __align__(16) float As[64];" in src
    assert "__shared__ __align__(16) float Bs[64];" in src
    for line in ("const int bx = blockIdx.x;", "const int by = blockIdx.y;",
                 "const int tx = threadIdx.x;", "const int ty = threadIdx.y;"):
        assert line in src
    assert src.count("__syncthreads();") == 2
    assert "float acc[1];" in src  # a local array: registers
    assert "if (" not in src  # extents equal the launch: no guards
    # shared arrays first, at the kernel's top, then the thread indices, then the body
    body = src[src.index("tiled_matmul_kernel0("):]
    assert body.index("__shared__") < body.index("blockIdx.x") < body.index("acc[0] = 0.0f;")


def test_header_and_launch_table():
    src = render_cuda(tiled_matmul(), meta={"workload": "abc123", "target": "cuda(sm_90)",
                                            "trace": "7 instructions"})
    head = src.splitlines()[:8]
    assert head[0].startswith("// Machine generated by looptune")
    assert "// workload: abc123" in head and "// trace: 7 instructions" in head
    assert "// target: cuda(sm_90)" in head
    assert ("// launch: grid (4, 4, 1), block (8, 8, 1) (64 threads), 512 bytes of shared "
            "memory (static)") in src
    (launch,) = launch_table(tiled_matmul())
    assert (launch.name, launch.grid, launch.block, launch.shared_bytes,
            launch.dynamic_shared_bytes) == ("tiled_matmul_kernel0", (4, 4, 1), (8, 8, 1), 512, 0)
    assert launch.args == (("param", 0), ("param", 1), ("param", 2))
    assert type(launch).from_json(launch.to_json()) == launch


def test_source_is_deterministic():
    assert render_cuda(tiled_matmul()) == render_cuda(tiled_matmul())
    assert render_cuda(elementwise(lanes=4)) == render_cuda(elementwise(lanes=4))


def test_short_thread_loop_is_guarded():
    src = render_cuda(elementwise(threads=32, extent=20))
    assert "const int tx = threadIdx.x;" in src
    assert "if (tx < 20) {" in src


def test_thread_loop_longer_than_the_launch_is_refused():
    prog = elementwise(threads=32)
    k = prog.kernels[0]
    bad = GpuProgram(prog.func, (Kernel(k.name, k.body, k.params, k.grid, (16, 1, 1)),))
    with pytest.raises(BuildError, match="32 iterations but the kernel launches 16"):
        render_cuda(bad)


def test_float4_loads_and_stores_where_aligned():
    src = render_cuda(elementwise(lanes=4))
    assert "const float4 lt_v0 = *(const float4*)(A + " in src
    assert "*(float4*)(C + " in src and "make_float4(" in src
    assert "lt_v0.x" in src and "lt_v1.w" in src


def test_unaligned_vectors_go_element_by_element():
    src = render_cuda(elementwise(lanes=4, offset=1))  # base = 4 * (..) + 1: not a multiple
    assert "*(const float4*)" not in src and "*(float4*)" not in src
    assert "make_float4(A[bx * 128 + tx * 4 + 1], A[bx * 128 + tx * 4 + 2]," in src
    assert "C[bx * 128 + tx * 4 + 4] = lt_v0.w * lt_v1.w + lt_v0.w;" in src  # lane by lane


def test_alignment_is_proved_not_assumed():
    r = CUDARenderer()
    i, j = Var("i"), Var("j")
    r.dom = {i: (0, 99), j: (0, 7)}
    assert r.multiple_of(binary("+", binary("*", i, const(8)), binary("*", j, const(4))), 4)
    assert not r.multiple_of(binary("+", binary("*", i, const(8)), j), 4)
    assert r.multiple_of(binary("*", binary("//", i, const(3)), const(4)), 4)
    assert r.multiple_of(binary("-", binary("*", binary("+", i, const(1)), const(4)), const(4)), 4)


def test_float16_and_bfloat16():
    def fn(a, b):
        return binary("+", binary("*", call("exp", a), b), const(1.0, a.dtype))
    src = render_cuda(elementwise("float16", fn=fn))
    assert "#include <cuda_fp16.h>" in src and "cuda_bf16.h" not in src
    assert "const __half* __restrict__ A" in src
    assert "hexp(A[" in src and "__half(1.0f)" in src
    src = render_cuda(elementwise("bfloat16", fn=lambda a, b: call("tanh", binary("*", a, b))))
    assert "#include <cuda_bf16.h>" in src and "__nv_bfloat16* __restrict__ C" in src
    assert "__nv_bfloat16(tanhf((float)(" in src  # no bf16 tanh: through float


def test_half2_and_wide_half_vectors():
    src = render_cuda(elementwise("float16", lanes=2))
    assert "const __half2 lt_v0 = *(const __half2*)(A + " in src
    assert "*(__half2*)(C + " in src and "__halves2half2(" in src
    src = render_cuda(elementwise("float16", lanes=8))  # 16 bytes: moved as a uint4
    assert "*(uint4*)lt_v0 = *(const uint4*)(A + " in src
    assert "*(uint4*)(C + " in src


def test_loads_under_a_select_are_not_hoisted():
    def fn(a, b, tx):  # B is only read where the guard holds (as padding guards do)
        return binary("+", a, select(binary("<", tx, const(30)), b, const(0.0)))
    src = render_cuda(elementwise(lanes=4, fn=fn))
    assert "const float4 lt_v0 = *(const float4*)(A + " in src  # A: read unconditionally
    assert "*(const float4*)(B" not in src
    assert "(tx < 30 ? B[bx * 128 + tx * 4 + 3] : 0.0f)" in src


def test_math_names():
    prog = elementwise(fn=lambda a, b: binary("+", call("exp", a), call("rsqrt", b)))
    assert "expf(A[" in render_cuda(prog) and "rsqrtf(B[" in render_cuda(prog)
    assert "__expf(A[" in render_cuda(prog, fast_math=True)
    src = render_cuda(elementwise(fn=lambda a, b: binary("max", a, const(float("inf")))))
    assert "__int_as_float(0x7f800000)" in src and "INFINITY" not in src
    assert "static __device__ __forceinline__ float lt_max_float32(float a, float b)" in src


def test_int_types_need_no_headers():
    src = render_cuda(elementwise("int64", fn=lambda a, b: binary("+", a, const(3, "int64"))))
    assert "long long* __restrict__ C" in src and "3LL" in src
    assert "int64_t" not in src and "#include" not in src


def test_big_shared_memory_is_dynamic():
    prog = big_shared()
    src = render_cuda(prog)
    assert "extern __shared__ __align__(16) unsigned char lt_smem[];" in src
    assert "float* __restrict__ S = (float*)(lt_smem + 0);" in src
    (launch,) = launch_table(prog)
    assert launch.dynamic_shared_bytes == 65536
    assert "65536 bytes of shared memory (dynamic)" in src


def test_names_clear_of_cuda_builtins():
    A, C = Buffer("threadIdx", (32,), "float32"), Buffer("exp", (32,), "float32")
    tx = Var("min")
    body = For(tx, 32, "thread_binding", BufferStore(C, call("exp", ld(A, tx)), (tx,)),
               "threadIdx.x")
    prog = GpuProgram(PrimFunc("odd", (A, C), body),
                      (Kernel("odd kernel", body, (A, C), (1, 1, 1), (32, 1, 1)),))
    src = render_cuda(prog)
    assert "v_exp[v_min] = expf(v_threadIdx[v_min]);" in src
    assert "odd_kernel(" in src


def test_c_renderer_refuses_gpu_code():
    with pytest.raises(BuildError, match="CUDA renderer"):
        CRenderer().render(tiled_matmul().func)


# ------------------------------------------------------------------------------ dtypes
def test_bfloat16_dtype():
    assert dt.parse("bfloat16x2") == ("bfloat16", 2) and dt.nbytes("bfloat16x4") == 8
    assert dt.is_float("bfloat16") and dt.promote("bfloat16", "float16") == "float32"
    assert dt.promote("bfloat16", "float32") == "float32"
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert dt.numpy_dtype("bfloat16") == np.dtype(ml_dtypes.bfloat16)


def test_bfloat16_without_ml_dtypes_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    with pytest.raises(dt.DTypeError, match="pip install ml_dtypes"):
        dt.numpy_name("bfloat16")


# ------------------------------------------------------------------------------ target
class FakeDevice:
    """An H100 as the driver reports it."""
    ATTRS = {"COMPUTE_CAPABILITY_MAJOR": 9, "COMPUTE_CAPABILITY_MINOR": 0,
             "MULTIPROCESSOR_COUNT": 132, "MAX_THREADS_PER_BLOCK": 1024,
             "MAX_SHARED_MEMORY_PER_BLOCK": 49152, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448,
             "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 233472, "MAX_REGISTERS_PER_BLOCK": 65536,
             "MAX_THREADS_PER_MULTIPROCESSOR": 2048, "WARP_SIZE": 32,
             "L2_CACHE_SIZE": 52428800}

    def name(self):
        return "NVIDIA H100 80GB HBM3"

    def attribute(self, name):
        return self.ATTRS[name]


def test_target_from_device_attributes():
    t = cuda_target_from_device(FakeDevice())
    assert (t.kind, t.arch, t.model, t.cores) == ("cuda", "sm_90", "NVIDIA H100 80GB HBM3", 132)
    assert t.max_threads_per_block == 1024 and t.warp_size == 32
    assert t.max_shared_memory_per_block == 49152
    assert t.max_shared_memory_per_block_optin == 232448
    assert t.max_registers_per_block == 65536 and t.l2_bytes == 52428800
    assert t.compute_capability == (9, 0)
    assert Target.from_json(t.to_json()) == t


def test_named_cuda_target_needs_no_driver():
    t = cuda_target("sm_80")
    assert (t.arch, t.cores, t.max_shared_memory_per_block_optin) == ("sm_80", 108, 166912)


def test_cuda_target_falls_back_without_a_gpu(monkeypatch):
    import looptune.runtime.cuda as rc
    import looptune.target.cuda_device as cd
    from looptune.target import target as tmod

    def no_gpu(device=0):
        raise rc.CudaUnavailable("no CUDA GPU can be used here: test")
    monkeypatch.setattr(cd, "DeviceQuery", no_gpu)
    tmod._detected_cuda.cache_clear()
    try:
        t = Target.create("cuda")
    finally:
        tmod._detected_cuda.cache_clear()
    assert t.arch == "sm_90" and "no CUDA GPU detected" in t.model
    assert t.max_threads_per_block == 1024


# ------------------------------------------------------------------------------ runtime
def test_kernel_args_are_pointers_to_the_values():
    from looptune.runtime.cuda import KernelArgs
    ptrs = [0x7F0000001000, 0x7F0000002000, 0x10]
    ka = KernelArgs(ptrs)
    slots = ctypes.cast(ka.address, ctypes.POINTER(ctypes.c_void_p))
    for i, p in enumerate(ptrs):
        assert ctypes.cast(slots[i], ctypes.POINTER(ctypes.c_uint64))[0] == p
    assert KernelArgs([]).address == 0


def test_missing_cuda_python_is_a_clear_build_error(monkeypatch):
    import looptune.runtime.cuda as rc
    import looptune.runtime.cuda_compile as cc
    for mod in ("cuda", "cuda.bindings", "cuda.bindings.driver", "cuda.bindings.nvrtc",
                "cuda.cuda", "cuda.nvrtc"):
        monkeypatch.setitem(sys.modules, mod, None)
    monkeypatch.setattr(cc, "_nvcc", lambda: None)
    cuda_device._driver_state.cache_clear()
    cc._nvrtc_version.cache_clear()
    try:
        assert rc.gpu_available()[0] is False
        with pytest.raises(BuildError, match=r"pip install 'looptune\[cuda\]'"):
            rc.compile_cuda("extern \"C\" __global__ void k() {}", arch="sm_80")
    finally:
        cuda_device._driver_state.cache_clear()
        cc._nvrtc_version.cache_clear()


def test_build_without_a_gpu_is_a_clear_build_error(monkeypatch):
    import looptune as lt
    import looptune.runtime.cuda as rc
    from looptune.build import generate_source
    sch = bound_schedule()
    _, src = generate_source(sch, cuda_target("sm_80"))
    assert '__global__ void __launch_bounds__(32)' in src
    monkeypatch.setattr(rc, "gpu_available", lambda: (False, "no device (test)"))
    with pytest.raises(BuildError, match=r"needs an NVIDIA GPU.*generate_source"):
        lt.build(sch, target=cuda_target("sm_80"))


def test_unbound_function_on_cuda_is_refused():
    import looptune as lt
    from looptune import te
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(BuildError, match="building for cuda is not supported.*target='cpu'"):
        lt.build(te.create_prim_func([A, B]), target=cuda_target("sm_80"))


def test_cuda_runner_is_registered_and_imports_no_cuda():
    from looptune.tune.runner import CudaRunner, Runner
    assert isinstance(Runner.create("cuda"), CudaRunner)
    code = ("import sys, looptune, looptune.tune.runner, looptune.codegen.cuda, looptune.build; "
            "print(any(m == 'cuda' or m.startswith('cuda.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def two_kernels(n=64):
    """T = A * 2 (kernel 0, T an intermediate), C = T + B (kernel 1)."""
    A, B, C = (Buffer(x, (n,), "float32") for x in "ABC")
    T = Buffer("T", (n,), "float32")
    tx = Var("tx")
    k0 = For(tx, n, "thread_binding", BufferStore(T, binary("*", ld(A, tx), const(2.0)), (tx,)),
             "threadIdx.x")
    k1 = For(tx, n, "thread_binding", BufferStore(C, binary("+", ld(T, tx), ld(B, tx)), (tx,)),
             "threadIdx.x")
    from looptune.tir.stmt import seq
    func = PrimFunc("two", (A, B, C), seq(k0, k1))
    return GpuProgram(func, (Kernel("two_kernel0", k0, (A, T), (1, 1, 1), (n, 1, 1)),
                             Kernel("two_kernel1", k1, (T, B, C), (1, 1, 1), (n, 1, 1))), (T,))


@pytest.fixture
def fake_driver(monkeypatch):
    n = 64
    kernels = {"two_kernel0": (2, lambda p: floats(p[1], n).__setitem__(
                   slice(None), floats(p[0], n) * 2)),
               "two_kernel1": (3, lambda p: floats(p[2], n).__setitem__(
                   slice(None), floats(p[0], n) + floats(p[1], n)))}
    drv = FakeDriver(kernels)
    install(monkeypatch, drv)
    yield drv
    cuda_device._driver_state.cache_clear()


def test_module_launches_every_kernel_with_intermediates(fake_driver):
    from looptune.build import args_info
    from looptune.backend.cuda import intermediates_of
    from looptune.runtime.cuda import CudaModule, DeviceArray
    prog = two_kernels()
    mod = CudaModule(b"fake image", launch_table(prog), args_info(prog.func),
                     intermediates_of(prog))
    a, b = rand(64), rand(64, seed=1)
    c = np.full(64, np.nan, "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a * 2 + b, rtol=1e-6)
    (k0, _, block0, _, p0), (k1, _, _, _, p1) = fake_driver.launches
    assert (k0, k1, block0) == ("two_kernel0", "two_kernel1", (64, 1, 1))
    assert p0[1] == p1[0]  # the intermediate T: written by kernel 0, read by kernel 1
    da, db, dc = DeviceArray.from_numpy(a), DeviceArray.from_numpy(b), DeviceArray((64,))
    mod(da, db, dc)
    np.testing.assert_allclose(dc.numpy(), a * 2 + b, rtol=1e-6)
    assert fake_driver.launches[-1][4][1:] == [db.ptr, dc.ptr]  # device arrays used in place
    prof = mod.time_evaluator(number=3, repeat=4)(da, db, dc)
    assert prof.results == (2e-3,) * 4  # 2 kernels of 1 ms per run
    with pytest.raises(RunError, match="must have shape"):
        mod(a[:10], b, c)
    with pytest.raises(RunError, match="overlap"):
        mod(da, db, da)


def write_artifact(tmp_path, prog, name):
    import json

    from looptune.backend.cuda import intermediates_of
    from looptune.build import args_info
    from looptune.runtime.cuda import ARTIFACT_FORMAT
    (tmp_path / f"{name}.cubin").write_bytes(b"fake image")
    desc = {"format": ARTIFACT_FORMAT, "image": f"{name}.cubin", "arch": "sm_90",
            "compiler": "fake", "kernels": [k.to_json() for k in launch_table(prog)],
            "args": [a.to_json() for a in args_info(prog.func)],
            "intermediates": intermediates_of(prog)}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(desc))
    return str(path), args_info(prog.func)


class Conn:
    def __init__(self):
        self.sent = []

    def send(self, msg):
        self.sent.append(msg)


def test_cuda_worker_measures_and_checks(fake_driver, tmp_path):
    from looptune.tune.runner import EvaluatorConfig, RunnerInput
    from looptune.tune.runner.cuda import CudaWorker
    path, info = write_artifact(tmp_path, two_kernels(), "two")
    worker = CudaWorker(Conn())
    cfg = EvaluatorConfig(number=2, repeat=3, min_repeat_ms=0)
    res = worker.measure(RunnerInput(path, "two", info, cfg, reference=(path, "two")), 1e-3, 1e-3)
    assert res == {"run_secs": (2e-3,) * 3}
    assert [m[0] for m in worker.conn.sent] == ["reference", "reference_done", "first"]
    # a kernel that computes something else: a wrong result
    fake_driver.kernels["two_kernel1"] = (3, lambda p: floats(p[2], 64).__setitem__(
        slice(None), floats(p[0], 64)))
    res = worker.measure(RunnerInput(path, "two", info, cfg, reference=(path, "two"), seed=0),
                         1e-3, 1e-3)
    assert res["error_class"] == "wrong_result" and "of C differ" in res["error_msg"]
    with pytest.raises(RunError, match="no CUDA device"):
        CudaWorker(Conn(), init_error="no CUDA device (test)").measure(
            RunnerInput(path, "two", info, cfg), 1e-3, 1e-3)


def bound_schedule(n=256):
    """B = A * 2 + 1 with its loop split and bound to blockIdx.x / threadIdx.x."""
    from looptune import te
    from looptune.schedule import Schedule
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    sch = Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    bx, tx = sch.split(i, [None, 32])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch


# ------------------------------------------------------------------------------ compiling
def programs():
    return {"tiled_matmul": tiled_matmul(), "float4": elementwise(lanes=4),
            "unaligned": elementwise(lanes=4, offset=1),
            "fp16": elementwise("float16", fn=lambda a, b: binary(
                "+", call("exp", a), call("sigmoid", binary("max", a, b)))),
            "half2": elementwise("float16", lanes=2), "half8": elementwise("float16", lanes=8),
            "bf16": elementwise("bfloat16", fn=lambda a, b: binary(
                "*", call("sqrt", a), call("erf", b))),
            "int64": elementwise("int64", fn=lambda a, b: binary("//", a, b)),
            "guarded": elementwise(extent=20), "dynamic_shared": big_shared(),
            "select": elementwise(lanes=4, fn=lambda a, b, tx: binary(
                "+", a, select(binary("<", tx, const(30)), b, const(0.0)))),
            "casts": elementwise("float16", fn=lambda a, b: cast(
                binary("+", cast(a, "float32"), cast(cast(b, "int32"), "float32")), "float16"))}


@pytest.mark.skipif(not HAVE_NVCC, reason="needs nvcc")
@pytest.mark.parametrize("name", sorted(programs()))
def test_nvcc_compiles_the_generated_cuda(name, tmp_path):
    src = tmp_path / f"{name}.cu"
    src.write_text(render_cuda(programs()[name]))
    out = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-o", str(tmp_path / "k.cubin"),
                          str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr + src.read_text()


def _nvrtc_or_skip():
    from looptune.runtime import cuda as rc
    from looptune.runtime.cuda_compile import _nvrtc_version
    if _nvrtc_version() is None:
        pytest.skip("NVRTC is not installed (pip install cuda-python nvidia-cuda-nvrtc)")
    return rc


@pytest.mark.parametrize("name", ["tiled_matmul", "float4", "fp16", "bf16", "dynamic_shared"])
def test_nvrtc_compiles_the_generated_cuda(name):
    rc = _nvrtc_or_skip()
    if name in ("fp16", "bf16") and not rc.include_dirs():
        pytest.skip("no cuda_fp16.h for NVRTC (pip install nvidia-cuda-runtime)")
    prog = programs()[name]
    source = render_cuda(prog)
    ptx = rc.compile_cuda(source, arch="sm_80", name=name, compiler="nvrtc", output="ptx")
    text = ptx.read_bytes().decode(errors="replace")
    for k in launch_table(prog):
        assert f".entry {k.name}(" in text
    cubin = rc.compile_cuda(source, arch="sm_90", name=name, compiler="nvrtc")
    assert cubin.read_bytes()[:4] == b"\x7fELF"
    assert rc.compile_cuda(source, arch="sm_90", name=name, compiler="nvrtc") == cubin  # cached


def test_nvrtc_error_is_a_build_error_with_the_log():
    rc = _nvrtc_or_skip()
    with pytest.raises(BuildError, match="NVRTC failed") as e:
        rc.compile_cuda('extern "C" __global__ void k() { undefined_thing(); }', arch="sm_80",
                        name="broken", compiler="nvrtc")
    assert "undefined_thing" in e.value.log and e.value.source_path.endswith(".cu")


def test_artifact_describes_the_program():
    _nvrtc_or_skip()
    import json

    from looptune.build import args_info
    prog = tiled_matmul()
    path = compile_program(prog, render_cuda(prog), args_info(prog.func), arch="sm_90",
                              name="tiled_matmul", compiler="nvrtc")
    desc = json.loads(path.read_text())
    assert desc["kernels"][0]["name"] == "tiled_matmul_kernel0"
    assert [a["written"] for a in desc["args"]] == [False, False, True]
    assert (path.parent / desc["image"]).exists()


# ------------------------------------------------------------------------------ on a GPU
def rand(*shape, dtype="float32", seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


def load(prog, args=None):
    from looptune.build import args_info
    from looptune.runtime import cuda as rc
    target = Target.create("cuda")
    path = compile_program(prog, render_cuda(prog), args or args_info(prog.func),
                              arch=target.arch, name=prog.func.name)
    return rc.CudaModule.load(path)


@pytest.mark.gpu
def test_tiled_matmul_runs_on_the_gpu():
    mod = load(tiled_matmul(64, 8))
    a, b = rand(64 * 64), rand(64 * 64, seed=1)
    c = np.full(64 * 64, np.nan, "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c.reshape(64, 64), a.reshape(64, 64) @ b.reshape(64, 64),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_device_arrays_and_timing():
    from looptune.runtime.cuda import DeviceArray
    mod = load(tiled_matmul(128, 16))
    a, b = rand(128 * 128), rand(128 * 128, seed=1)
    da, db, dc = DeviceArray.from_numpy(a), DeviceArray.from_numpy(b), DeviceArray((128 * 128,))
    mod(da, db, dc)
    np.testing.assert_allclose(dc.numpy().reshape(128, 128),
                               a.reshape(128, 128) @ b.reshape(128, 128), rtol=1e-4, atol=1e-4)
    prof = mod.time_evaluator(number=5, repeat=3, min_repeat_ms=1)(da, db, dc)
    assert len(prof.results) == 3 and 0 < prof.median < 0.1


def expected(name, arrays):
    """What program `name` of programs() leaves in its last argument, computed with numpy."""
    import math
    if name == "dynamic_shared":
        return arrays[0]
    a, b, c = (x.astype("float64") for x in arrays)
    out = c.copy()
    if name == "unaligned":
        out[1:] = a[1:] * b[1:] + a[1:]
    elif name == "guarded":  # threads 20..31 of each block do nothing
        on = np.arange(len(c)) % 32 < 20
        out[on] = (a * b + a)[on]
    elif name == "select":
        tx = np.arange(len(c)) % 128 // 4
        out = a + np.where(tx < 30, b, 0.0)
    elif name == "fp16":
        out = np.exp(a) + 1 / (1 + np.exp(-np.maximum(a, b)))
    elif name == "bf16":
        out = np.sqrt(a) * np.vectorize(math.erf)(b)
    else:
        out = a * b + a
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["float4", "unaligned", "half2", "half8", "guarded",
                                  "dynamic_shared", "select", "fp16", "bf16"])
def test_vector_and_guarded_programs_on_the_gpu(name):
    prog = programs()[name]
    dtype = dt.numpy_dtype(prog.func.params[0].dtype)
    arrays = [np.abs(rand(b.size, seed=i)).astype(dtype) if name == "bf16"
              else rand(b.size, seed=i).astype(dtype) for i, b in enumerate(prog.func.params)]
    expect = expected(name, arrays)
    load(prog)(*arrays)
    tol = 1e-5 if dtype == np.float32 else 2e-2
    np.testing.assert_allclose(arrays[-1].astype("float64"), expect, rtol=tol, atol=tol)


@pytest.mark.gpu
def test_cuda_runner_measures_and_checks():
    from looptune.build import args_info
    from looptune.tune.runner import EvaluatorConfig, Runner, RunnerInput
    good = tiled_matmul(64, 8)
    wrong = elementwise(n=64 * 64, fn=lambda a, b: a)  # C = A: same arguments, other result
    arch = Target.create("cuda").arch
    info = args_info(good.func)
    good_path, wrong_path = (str(compile_program(p, render_cuda(p), info, arch=arch, name=n))
                             for p, n in ((good, "good"), (wrong, "wrong")))
    runner = Runner.create("cuda")
    try:
        cfg = EvaluatorConfig(repeat=3, min_repeat_ms=1)
        ok, bad = runner.run([
            RunnerInput(good_path, "good", info, cfg, reference=(good_path, "good")),
            RunnerInput(wrong_path, "wrong", info, cfg, reference=(good_path, "good"))])
        assert ok.ok and len(ok.run_secs) == 3
        assert bad.error_class == "wrong_result", bad
    finally:
        runner.close()


@pytest.mark.gpu
def test_build_runs_a_scheduled_function_on_the_gpu():
    import looptune as lt
    sch = bound_schedule()
    mod = lt.build(sch, target="cuda")
    a = rand(256)
    b = np.full(256, np.nan, "float32")
    mod(a, b)
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
