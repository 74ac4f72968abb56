"""CUDA programs in this process: compile generated CUDA C to a cubin, load it through the
driver API, launch a program's kernels in order, and time them with CUDA events.

The compiler is NVRTC where it is installed, else nvcc:

- NVRTC (cuda-python's `cuda.bindings.nvrtc` over libnvrtc from the nvidia-cuda-nvrtc wheel)
  installs with pip, needs no CUDA toolkit and no GPU, compiles in this process (no compiler
  process to start, no temporary files: what a tuner building hundreds of candidates wants)
  and emits a cubin for the target's exact architecture. Headers (cuda_fp16.h, cuda_bf16.h)
  come from the nvidia-cuda-runtime wheel or a toolkit; fp32 code needs none.
- nvcc (`nvcc -cubin`) where a CUDA toolkit is installed but not NVRTC's wheels: the same
  language and headers, one process per compile.

Either way the cubin is cached (key: source, architecture, compiler and its version). Every
import of cuda-python happens on first use, so looptune imports, and renders CUDA, with no
CUDA installed; what needs CUDA raises BuildError (compiling, loading) or RunError
(launching) saying what to install. `pip install 'looptune[cuda]'` installs it all (CUDA 13
wheels; for a driver older than CUDA 13: cuda-python 12.x, nvidia-cuda-nvrtc-cu12 and
nvidia-cuda-runtime-cu12).
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..codegen.cuda import KernelLaunch
from ..tir import dtype as dt
from .compiler import _atomic_write, _cache_dir, _file_name
from .error import BuildError, RunError
from .module import ArgInfo, ProfileResult
from .timer import calibrate

INSTALL_HINT = ("pip install 'looptune[cuda]' (cuda-python, NVRTC and ml_dtypes), with an "
                "NVIDIA driver for the GPU")
ARRAY_ALIGN = 16  # kernels access global memory 16 bytes at a time where they can


class CudaUnavailable(BuildError):
    """cuda-python, the driver or a GPU is missing."""


# ---------------------------------------------------------------------------- cuda-python
def _bindings(which: str):
    """cuda-python's `driver` or `nvrtc` module (cuda.bindings from 12.6 on, cuda.* before)."""
    try:
        return importlib.import_module(f"cuda.bindings.{which}")
    except ImportError:
        pass
    try:
        return importlib.import_module({"driver": "cuda.cuda", "nvrtc": "cuda.nvrtc"}[which])
    except ImportError:
        raise CudaUnavailable(f"cuda-python is not installed (no cuda.bindings.{which}); "
                              f"{INSTALL_HINT}") from None


def _check(result, what: str, error=RunError):
    """cuda-python answers (status, *values): the values, or `error` naming the call."""
    if not isinstance(result, tuple):
        result = (result,)
    status, rest = result[0], result[1:]
    if int(status) != 0:
        raise error(f"{what} failed: {_status_text(status)}")
    return rest[0] if len(rest) == 1 else rest


def _status_text(status) -> str:
    name = getattr(status, "name", str(status))
    try:
        if name.startswith("NVRTC"):
            return name
        drv = _bindings("driver")
        _, text = drv.cuGetErrorString(status)
        return f"{name} ({text.decode() if isinstance(text, bytes) else text})"
    except Exception:  # noqa: BLE001 - only the message suffers
        return name


@lru_cache(maxsize=1)
def _driver_state() -> tuple:
    """(driver module, None) once cuInit succeeds and a device exists, else (None, why)."""
    try:
        drv = _bindings("driver")
    except CudaUnavailable as e:
        return None, str(e)
    try:
        status, = drv.cuInit(0)
    except Exception as e:  # noqa: BLE001 - the bindings raise when libcuda.so is missing
        return None, f"the NVIDIA driver (libcuda) cannot be loaded: {e}"
    if int(status) != 0:
        return None, f"cuInit failed: {_status_text(status)}"
    status, n = drv.cuDeviceGetCount()
    if int(status) != 0 or n == 0:
        return None, "the driver sees no CUDA device"
    return drv, None


def gpu_available() -> tuple[bool, str]:
    """(True, "") when a CUDA device can be used here, else (False, why not)."""
    drv, why = _driver_state()
    return drv is not None, why or ""


def _driver():
    drv, why = _driver_state()
    if drv is None:
        raise CudaUnavailable(f"no CUDA GPU can be used here: {why}")
    return drv


_CONTEXTS: dict = {}


def use_device(device: int = 0):
    """Make `device`'s primary context current in this thread; returns the driver module."""
    drv = _driver()
    ctx = _CONTEXTS.get(device)
    if ctx is None:
        dev = _check(drv.cuDeviceGet(device), f"cuDeviceGet({device})", CudaUnavailable)
        ctx = _CONTEXTS[device] = _check(drv.cuDevicePrimaryCtxRetain(dev),
                                         "cuDevicePrimaryCtxRetain", CudaUnavailable)
    _check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return drv


def synchronize(device: int = 0) -> None:
    """Wait for the device; a kernel's failure (a bad address, ...) is raised here."""
    drv = use_device(device)
    _check(drv.cuCtxSynchronize(), "running the kernels (cuCtxSynchronize)")


class DeviceQuery:
    """What Target detection reads from the driver: `name()`, and `attribute(NAME)`, the
    value of CU_DEVICE_ATTRIBUTE_<NAME>."""

    def __init__(self, device: int = 0):
        self.drv = _driver()
        self.dev = _check(self.drv.cuDeviceGet(device), f"cuDeviceGet({device})",
                          CudaUnavailable)

    def name(self) -> str:
        raw = _check(self.drv.cuDeviceGetName(256, self.dev), "cuDeviceGetName")
        return raw.split(b"\0", 1)[0].decode(errors="replace").strip()

    def attribute(self, name: str) -> int:
        attr = getattr(self.drv.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        return int(_check(self.drv.cuDeviceGetAttribute(attr, self.dev), f"attribute {name}"))


# ---------------------------------------------------------------------------- compiling
def include_dirs() -> list:
    """Where cuda_fp16.h and cuda_bf16.h are (the nvidia-cuda-runtime wheel or a toolkit)."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory
        found = find_nvidia_header_directory("cudart")
        if found:
            return [found]
    except Exception:  # noqa: BLE001 - an older cuda-python without pathfinder
        pass
    return [d for d in ("/usr/local/cuda/include",) if os.path.isfile(f"{d}/cuda_fp16.h")]


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.access(p, os.X_OK)), None)


@lru_cache(maxsize=None)
def _nvrtc_version() -> str | None:
    try:
        nvrtc = _bindings("nvrtc")
        major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion", BuildError)
        return f"nvrtc {major}.{minor}"
    except Exception:  # noqa: BLE001 - no cuda-python, or no libnvrtc behind it
        return None


@lru_cache(maxsize=None)
def _nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    return f"nvcc {out.stdout.strip().splitlines()[-1] if out.stdout.strip() else '?'}"


def cuda_compiler(compiler: str = "auto") -> tuple[str, str]:
    """("nvrtc" or "nvcc", its version) for `compiler` ("auto": NVRTC if installed, else
    nvcc); BuildError when neither is there."""
    if compiler not in ("auto", "nvrtc", "nvcc"):
        raise BuildError(f"unknown CUDA compiler {compiler!r}; use 'auto', 'nvrtc' or 'nvcc'")
    if compiler in ("auto", "nvrtc"):
        v = _nvrtc_version()
        if v is not None:
            return "nvrtc", v
        if compiler == "nvrtc":
            raise CudaUnavailable(f"NVRTC is not installed; {INSTALL_HINT}")
    nvcc = _nvcc()
    if nvcc is None:
        raise CudaUnavailable(f"no CUDA compiler: neither NVRTC nor nvcc is installed; "
                              f"{INSTALL_HINT}, or install a CUDA toolkit (nvcc)")
    return "nvcc", _nvcc_version(nvcc)


def compile_cuda(source: str, *, arch: str, name: str = "kernel", compiler: str = "auto",
                 output: str = "cubin", options=(), timeout: float | None = None) -> Path:
    """Compile CUDA C for `arch` ("sm_90") to a cubin (or `output="ptx"`), or reuse the cached
    one; returns its path. The source is kept beside it (`.cu`)."""
    if output not in ("cubin", "ptx"):
        raise BuildError(f"output must be 'cubin' or 'ptx', got {output!r}")
    kind, version = cuda_compiler(compiler)
    options = list(options)
    key = hashlib.sha256("\0".join([source, arch, output, kind, version, *options]).encode())
    cache = _cache_dir("cuda")
    stem = f"{_file_name(name)}_{key.hexdigest()[:20]}"
    out_path, src_path = cache / f"{stem}.{output}", cache / f"{stem}.cu"
    if out_path.exists():
        return out_path
    _atomic_write(src_path, source)
    if kind == "nvrtc":
        image = _nvrtc_compile(source, arch, name, output, options, str(src_path))
    else:
        image = _nvcc_compile(src_path, arch, output, options, timeout)
    _atomic_write_bytes(out_path, image)
    return out_path


def _nvrtc_compile(source, arch, name, output, options, src_path) -> bytes:
    nvrtc = _bindings("nvrtc")
    virtual = arch.replace("sm_", "compute_") if output == "ptx" else arch
    opts = [f"--gpu-architecture={virtual}", "--std=c++17", *options]
    opts += [f"--include-path={d}" for d in include_dirs()]
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []),
                  "nvrtcCreateProgram", BuildError)
    try:
        status = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])[0]
        if int(status) != 0:
            size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize", BuildError)
            log = b" " * size
            _check(nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog", BuildError)
            raise BuildError(f"NVRTC failed to compile the generated CUDA for {arch} "
                             f"({_status_text(status)}); code generated by looptune that does "
                             "not compile is a bug: please report it with the source", src_path,
                             log.rstrip(b"\0 ").decode(errors="replace")[-4000:])
        get_size, get = ((nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN) if output == "cubin"
                         else (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX))
        size = _check(get_size(prog), "reading NVRTC's output", BuildError)
        image = b" " * size
        _check(get(prog, image), "reading NVRTC's output", BuildError)
        return image
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _nvcc_compile(src_path: Path, arch: str, output: str, options, timeout) -> bytes:
    with tempfile.TemporaryDirectory(prefix="looptune-nvcc-") as tmp:
        out = Path(tmp) / f"kernel.{output}"
        cmd = [_nvcc(), f"-{output}", f"-arch={arch}", "-O3", "-std=c++17", *options,
               str(src_path), "-o", str(out)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)  # a timeout kills cicc/ptxas with it
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise BuildError(f"nvcc took longer than {timeout} s; allow it more time",
                             str(src_path), timed_out=True) from None
        if proc.returncode != 0:
            raise BuildError(f"nvcc failed to compile the generated CUDA for {arch} (exit "
                             f"{proc.returncode}); code generated by looptune that does not "
                             "compile is a bug: please report it with the source",
                             str(src_path), stderr[-4000:])
        return out.read_bytes()


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# ---------------------------------------------------------------------------- artifacts
ARTIFACT_FORMAT = 1


def compile_program(program, source: str, args, *, arch: str, name: str,
                    compiler: str = "auto", options=(), timeout: float | None = None) -> Path:
    """Compile a GpuProgram's source and describe it beside the cubin: a JSON artifact
    (image, launch table, arguments, intermediates) that `CudaModule.load` opens, in this
    process or a runner's worker."""
    from ..codegen.cuda import launch_table
    image = compile_cuda(source, arch=arch, name=name, compiler=compiler, options=options,
                         timeout=timeout)
    desc = {"format": ARTIFACT_FORMAT, "image": image.name, "arch": arch,
            "compiler": cuda_compiler(compiler)[1],
            "kernels": [k.to_json() for k in launch_table(program)],
            "args": [a.to_json() for a in args],
            "intermediates": intermediates_of(program)}
    path = image.with_suffix(".json")
    _atomic_write(path, json.dumps(desc, indent=1))
    return path


def intermediates_of(program) -> list:
    """The global buffers a program's kernels pass between them, as CudaModule takes them."""
    return [{"name": b.name, "dtype": b.dtype, "size": b.size} for b in program.intermediates]


# ---------------------------------------------------------------------------- memory
def _free(ptr: int, device: int) -> None:
    try:
        drv = use_device(device)
        drv.cuMemFree(ptr)
    except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone first
        pass


class DeviceArray:
    """One C-contiguous array in device memory (cuMemAlloc: 256-byte aligned). Any object
    with `__cuda_array_interface__` (torch, cupy) is accepted where a DeviceArray is."""

    def __init__(self, shape, dtype="float32", *, device: int = 0):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.device = device
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        drv = use_device(device)
        self.ptr = int(_check(drv.cuMemAlloc(max(1, self.nbytes)),
                              f"allocating {self.nbytes} bytes on the GPU (cuMemAlloc)"))
        self._finalizer = weakref.finalize(self, _free, self.ptr, device)

    @staticmethod
    def from_numpy(a: np.ndarray, *, device: int = 0) -> "DeviceArray":
        out = DeviceArray(a.shape, a.dtype, device=device)
        out.copy_from(a)
        return out

    def copy_from(self, a: np.ndarray) -> None:
        a = np.ascontiguousarray(a, dtype=self.dtype)
        if a.shape != self.shape:
            raise RunError(f"cannot copy an array of shape {a.shape} into one of {self.shape}")
        drv = use_device(self.device)
        _check(drv.cuMemcpyHtoD(self.ptr, a.ctypes.data, self.nbytes), "copying to the GPU")

    def numpy(self, out: np.ndarray | None = None) -> np.ndarray:
        """The array's contents, in `out` (C-contiguous, of its shape and dtype) if given."""
        if out is None:
            out = np.empty(self.shape, self.dtype)
        drv = use_device(self.device)
        _check(drv.cuMemcpyDtoH(out.ctypes.data, self.ptr, self.nbytes), "copying from the GPU")
        return out

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "strides": None, "version": 3}

    def free(self) -> None:
        self._finalizer()

    def __repr__(self):
        return f"DeviceArray({self.shape}, {self.dtype}, 0x{self.ptr:x})"


def device_pointer(a, info: ArgInfo) -> int:
    """The data pointer of a device array passed as argument `info`, checked."""
    cai = a.__cuda_array_interface__
    shape, strides = tuple(cai["shape"]), cai.get("strides")
    want = dt.numpy_dtype(info.dtype)
    if shape != tuple(info.shape):
        raise RunError(f"argument {info.name} must have shape {tuple(info.shape)}, got {shape}")
    if np.dtype(cai["typestr"]).itemsize != want.itemsize or (
            np.dtype(cai["typestr"]).kind != want.kind and want.kind != "V"):
        raise RunError(f"argument {info.name} must have dtype {want}, got {cai['typestr']}")
    if strides is not None:
        expect, acc = [], want.itemsize
        for n in reversed(shape):
            expect.append(acc)
            acc *= n
        if tuple(strides) != tuple(reversed(expect)):
            raise RunError(f"argument {info.name} must be C-contiguous on the device")
    ptr = int(cai["data"][0])
    if ptr % ARRAY_ALIGN:
        raise RunError(f"argument {info.name} starts at 0x{ptr:x}, not on a {ARRAY_ALIGN}-byte "
                       "boundary the kernels' vector accesses need; pass a copy (a fresh "
                       "allocation is aligned)")
    return ptr


class KernelArgs:
    """cuLaunchKernel's `kernelParams`: an array of N pointers, the i-th to the value of the
    kernel's i-th parameter (here a device pointer, 8 bytes). Keep it alive until launched."""

    def __init__(self, pointers):
        self.values = np.array([int(p) for p in pointers], dtype=np.uint64)
        base = self.values.ctypes.data
        self.slots = np.array([base + 8 * i for i in range(len(self.values))], dtype=np.uint64)

    @property
    def address(self) -> int:
        return int(self.slots.ctypes.data) if len(self.slots) else 0


# ---------------------------------------------------------------------------- modules
def _unload(module, device: int) -> None:
    try:
        drv = use_device(device)
        drv.cuModuleUnload(module)
    except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone first
        pass


class CudaModule:
    """A compiled GpuProgram on the device. `mod(*arrays)` runs its kernels in order on
    numpy arrays (copied to the device, outputs copied back into them) or device arrays
    (used in place); intermediates between kernels are allocated once per module.
    `mod.source` is its CUDA C."""

    def __init__(self, image: bytes, launches, args, intermediates=(), *, source: str = "",
                 device: int = 0, image_path: str | None = None):
        self.launches = tuple(launches)
        self.args = [a if isinstance(a, ArgInfo) else ArgInfo.from_json(a) for a in args]
        self.intermediates = tuple(intermediates)  # ({"name", "dtype", "size"}, ...)
        self.source = source
        self.device = device
        self.image_path = image_path
        drv = use_device(device)
        # a PTX image is text and must end in NUL; a cubin ignores what follows it
        self._image = np.frombuffer(bytes(image) + b"\0", dtype=np.uint8)
        self._module = _check(drv.cuModuleLoadData(self._image.ctypes.data),
                              f"loading {image_path or 'the compiled kernels'} (cuModuleLoadData; "
                              "compiled for another GPU? build for the detected target "
                              "Target.create('cuda'))", BuildError)
        self._finalizer = weakref.finalize(self, _unload, self._module, device)
        self._functions = []
        for k in self.launches:
            fn = _check(drv.cuModuleGetFunction(self._module, k.name.encode()),
                        f"finding kernel {k.name} in the module", BuildError)
            if k.dynamic_shared_bytes:
                attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                _check(drv.cuFuncSetAttribute(fn, attr, k.dynamic_shared_bytes),
                       f"{k.name}: allowing {k.dynamic_shared_bytes} bytes of shared memory",
                       BuildError)
            self._functions.append(fn)
        self._inter: list | None = None
        self._staging: dict = {}  # argument index -> DeviceArray for numpy arguments

    @staticmethod
    def load(path, *, device: int = 0) -> "CudaModule":
        """The module an artifact of compile_program describes."""
        path = Path(path)
        try:
            desc = json.loads(path.read_text())
            image = (path.parent / desc["image"]).read_bytes()
        except (OSError, ValueError, KeyError) as e:
            raise BuildError(f"cannot read the CUDA artifact {path}: {e}") from None
        if desc.get("format") != ARTIFACT_FORMAT:
            raise BuildError(f"the CUDA artifact {path} has format {desc.get('format')}, this "
                             f"looptune reads {ARTIFACT_FORMAT}; build it again")
        src = path.with_suffix(".cu")
        return CudaModule(image, [KernelLaunch.from_json(k) for k in desc["kernels"]],
                          desc["args"], desc["intermediates"],
                          source=src.read_text() if src.exists() else "", device=device,
                          image_path=str(path.parent / desc["image"]))

    # ------------------------------------------------------------------ arguments
    def arguments(self, arrays) -> tuple[list, list]:
        """(a device pointer per argument, [(numpy output, its device copy)] to copy back).
        numpy arrays are copied to the device (into buffers kept for the next call)."""
        if len(arrays) != len(self.args):
            names = ", ".join(a.name for a in self.args)
            raise RunError(f"the program takes {len(self.args)} arrays ({names}), got "
                           f"{len(arrays)}")
        ptrs, back, spans = [], [], []
        for i, (info, a) in enumerate(zip(self.args, arrays)):
            if isinstance(a, np.ndarray):
                want = dt.numpy_dtype(info.dtype)
                if a.dtype != want:
                    raise RunError(f"argument {info.name} must have dtype {want}, got "
                                   f"{a.dtype}; convert with .astype('{want}')")
                if a.shape != tuple(info.shape):
                    raise RunError(f"argument {info.name} must have shape "
                                   f"{tuple(info.shape)}, got {a.shape}")
                if info.written and not (a.flags.c_contiguous and a.flags.writeable):
                    raise RunError(f"argument {info.name} is an output: it must be a "
                                   "writeable C-contiguous array")
                dev = self._staging.get(i)
                if dev is None:
                    dev = self._staging[i] = DeviceArray(a.shape, a.dtype, device=self.device)
                dev.copy_from(a)
                if info.written:
                    back.append((a, dev))
                ptrs.append(dev.ptr)
            elif hasattr(a, "__cuda_array_interface__"):
                p = device_pointer(a, info)
                ptrs.append(p)
                spans.append((p, p + int(np.prod(info.shape)) * dt.nbytes(info.dtype), info))
            else:
                raise RunError(f"argument {info.name} must be a numpy array or a device array "
                               f"(DeviceArray, a torch or cupy CUDA array), got "
                               f"{type(a).__name__}")
        for j, (s1, e1, a1) in enumerate(spans):
            for s2, e2, a2 in spans[j + 1:]:
                if (a1.written or a2.written) and s1 < e2 and s2 < e1:
                    raise RunError(f"arguments {a1.name} and {a2.name} overlap in device "
                                   "memory; the kernels assume distinct buffers")
        return ptrs, back

    def _intermediate_ptrs(self) -> list:
        if self._inter is None:
            self._inter = [DeviceArray((d["size"],), dt.numpy_dtype(d["dtype"]),
                                       device=self.device) for d in self.intermediates]
        return [x.ptr for x in self._inter]

    def packed(self, ptrs) -> list:
        """(function, launch, KernelArgs) per kernel for these argument pointers."""
        inter = self._intermediate_ptrs()
        return [(fn, k, KernelArgs([ptrs[i] if kind == "param" else inter[i]
                                    for kind, i in k.args]))
                for fn, k in zip(self._functions, self.launches)]

    def launch_packed(self, packed, stream=0) -> None:
        drv = _driver()
        for fn, k, kargs in packed:
            _check(drv.cuLaunchKernel(fn, *k.grid, *k.block, k.dynamic_shared_bytes, stream,
                                      kargs.address, 0), f"launching {k.name}")

    # ------------------------------------------------------------------ calling
    def __call__(self, *arrays) -> None:
        use_device(self.device)
        ptrs, back = self.arguments(arrays)
        self.launch_packed(self.packed(ptrs))
        synchronize(self.device)
        for host, dev in back:
            dev.numpy(out=host)

    def time_evaluator(self, *, number: int = 10, repeat: int = 3, min_repeat_ms: float = 0,
                       warm_up: bool = True, enable_cache_flush: bool = False,
                       flush_bytes: int = 256 << 20):
        """A function of the same arrays that returns ProfileResult (seconds per run of all
        kernels), timed with CUDA events on the device: numpy arrays are copied to the device
        once, before timing, so this is the time of the kernels, as torch's timings are.
        One warm-up run first; each repeat times `number` runs, `number` raised until a
        repeat lasts `min_repeat_ms` (that calibration run is the first repeat); with cache
        flush, `flush_bytes` of device memory are written before every repeat (evicting L2)."""
        if number < 1 or repeat < 1:
            raise RunError(f"time_evaluator: number and repeat must be at least 1, got "
                           f"number={number}, repeat={repeat}")

        def run(*arrays) -> ProfileResult:
            drv = use_device(self.device)
            ptrs, _ = self.arguments(arrays)
            packed = self.packed(ptrs)
            flush = DeviceArray((flush_bytes,), "uint8", device=self.device) \
                if enable_cache_flush else None
            start = _check(drv.cuEventCreate(0), "cuEventCreate")
            end = _check(drv.cuEventCreate(0), "cuEventCreate")
            try:
                def timed(n: int) -> float:
                    if flush is not None:
                        _check(drv.cuMemsetD8(flush.ptr, 0, flush.nbytes), "flushing L2")
                    _check(drv.cuEventRecord(start, 0), "cuEventRecord")
                    for _ in range(n):
                        self.launch_packed(packed)
                    _check(drv.cuEventRecord(end, 0), "cuEventRecord")
                    _check(drv.cuEventSynchronize(end), "running the kernels")
                    return _check(drv.cuEventElapsedTime(start, end), "cuEventElapsedTime") / 1e3

                if warm_up:
                    timed(1)
                n, t = calibrate(timed, number, min_repeat_ms)
                results = [t / n] if t is not None and flush is None else []
                while len(results) < repeat:
                    results.append(timed(n) / n)
                return ProfileResult(tuple(results))
            finally:
                drv.cuEventDestroy(start)
                drv.cuEventDestroy(end)
                if flush is not None:
                    flush.free()

        return run

    def __repr__(self):
        return f"CudaModule({', '.join(k.name for k in self.launches)})"


def build_module(program, source: str, args, target, *, name: str, compiler: str = "auto",
                 options=(), timeout: float | None = None, device: int = 0) -> CudaModule:
    """Compile and load a GpuProgram for `target` (a cuda Target); CudaUnavailable (a
    BuildError) when no GPU can be used here."""
    ok, why = gpu_available()
    if not ok:
        raise CudaUnavailable(f"build(target='cuda') needs an NVIDIA GPU and its driver "
                              f"({why.rstrip('.')}); generate_source(sch, 'cuda') gives the "
                              "CUDA C without one")
    t0 = time.perf_counter()
    path = compile_program(program, source, args, arch=target.arch, name=name,
                           compiler=compiler, options=options, timeout=timeout)
    mod = CudaModule.load(path, device=device)
    mod.build_secs = time.perf_counter() - t0
    return mod
