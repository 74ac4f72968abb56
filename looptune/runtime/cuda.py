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

import json
import weakref
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..cuda_bindings import INSTALL_HINT, CudaUnavailable, _check
from ..error import BuildError, RunError
from ..target.cuda_device import DeviceQuery, _driver, gpu_available
from ..tir import dtype as dt
from .cuda_compile import ARTIFACT_FORMAT, compile_cuda, cuda_compiler, include_dirs
from .module import ArgInfo, ProfileResult
from .timer import calibrate

ARRAY_ALIGN = 16  # kernels access global memory 16 bytes at a time where they can

__all__ = ["ARRAY_ALIGN", "ARTIFACT_FORMAT", "INSTALL_HINT", "CudaModule", "CudaUnavailable",
           "DeviceArray", "DeviceQuery", "Launch", "compile_cuda", "cuda_compiler",
           "device_pointer", "gpu_available", "include_dirs", "synchronize", "use_device"]


class Launch(NamedTuple):
    """How one kernel of an artifact is launched, as its JSON says (the CUDA backend writes
    codegen.cuda.launch_table there): `args` holds ("param", i) or ("intermediate", j) per
    kernel parameter."""
    name: str
    grid: tuple
    block: tuple
    shared_bytes: int
    dynamic_shared_bytes: int
    args: tuple

    @staticmethod
    def of(x) -> "Launch":
        """A Launch from its JSON (a dict) or from anything with `to_json()`."""
        d = x if isinstance(x, dict) else x.to_json()
        return Launch(d["name"], tuple(d["grid"]), tuple(d["block"]), int(d["shared_bytes"]),
                      int(d["dynamic_shared_bytes"]), tuple((k, int(i)) for k, i in d["args"]))


# ---------------------------------------------------------------------------- the driver
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
        self.launches = tuple(Launch.of(k) for k in launches)
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
        """The module a CUDA artifact describes (backend.cuda writes them)."""
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
        return CudaModule(image, desc["kernels"],
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
