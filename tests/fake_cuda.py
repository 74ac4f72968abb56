"""A stand-in for NVIDIA's driver bindings (cuda.bindings.driver) on host memory, for testing
the Python side of the CUDA runtime with no GPU: allocations are numpy buffers, a launch
runs a Python stand-in for the kernel on the addresses in its kernelParams."""
from __future__ import annotations

import ctypes

import numpy as np


class FakeDriver:
    """cuda.bindings.driver on host memory, for the runtime's Python side: allocations are
    numpy buffers, a launch runs the named kernel's Python stand-in on the pointers it reads
    from kernelParams (as the driver does), events tick by 1 ms per launch."""

    class CUresult(int):
        name = "CUDA_SUCCESS"

    class CUfunction_attribute:
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

    def __init__(self, kernels):
        self.kernels = kernels  # name -> (number of parameters, fn(list of addresses))
        self.memory, self.launches, self.clock, self.events = {}, [], 0.0, {}
        self.ok = self.CUresult(0)

    def cuInit(self, flags): return (self.ok,)
    def cuDeviceGetCount(self): return self.ok, 1
    def cuDeviceGet(self, i): return self.ok, i
    def cuDevicePrimaryCtxRetain(self, dev): return self.ok, "ctx"
    def cuCtxSetCurrent(self, ctx): return (self.ok,)
    def cuCtxSynchronize(self): return (self.ok,)
    def cuModuleLoadData(self, ptr): return self.ok, "module"
    def cuModuleGetFunction(self, module, name): return self.ok, name.decode()
    def cuFuncSetAttribute(self, fn, attr, value): return (self.ok,)
    def cuModuleUnload(self, module): return (self.ok,)

    def cuMemAlloc(self, n):
        buf = np.zeros(n + 256, np.uint8)
        addr = buf.ctypes.data + (-buf.ctypes.data) % 256
        self.memory[addr] = buf
        return self.ok, addr

    def cuMemFree(self, addr):
        self.memory.pop(addr, None)
        return (self.ok,)

    def cuMemcpyHtoD(self, dst, src, n):
        ctypes.memmove(dst, src, n)
        return (self.ok,)

    def cuMemcpyDtoH(self, dst, src, n):
        ctypes.memmove(dst, src, n)
        return (self.ok,)

    def cuMemsetD8(self, dst, value, n):
        ctypes.memset(dst, value, n)
        return (self.ok,)

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        nargs, run = self.kernels[fn]
        slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        ptrs = [ctypes.cast(slots[i], ctypes.POINTER(ctypes.c_uint64))[0] for i in range(nargs)]
        self.launches.append((fn, (gx, gy, gz), (bx, by, bz), shared, ptrs))
        run(ptrs)
        self.clock += 1.0
        return (self.ok,)

    def cuEventCreate(self, flags):
        e = len(self.events)
        self.events[e] = 0.0
        return self.ok, e

    def cuEventRecord(self, e, stream):
        self.events[e] = self.clock
        return (self.ok,)

    def cuEventSynchronize(self, e): return (self.ok,)
    def cuEventElapsedTime(self, a, b): return self.ok, self.events[b] - self.events[a]
    def cuEventDestroy(self, e): return (self.ok,)


def floats(addr, n):
    return np.ctypeslib.as_array((ctypes.c_float * n).from_address(addr))


def install(monkeypatch, drv):
    """Make looptune.runtime.cuda use `drv` as the driver until the test ends."""
    import looptune.runtime.cuda as rc
    import looptune.target.cuda_device as cd
    real = cd._bindings
    monkeypatch.setattr(cd, "_bindings", lambda which: drv if which == "driver" else real(which))
    monkeypatch.setattr(rc, "_CONTEXTS", {})
    cd._driver_state.cache_clear()
