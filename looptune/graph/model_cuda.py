"""The CUDA model code: each task's kernel (planner.py) loaded as a CudaModule and run in
order by a CudaModel on device memory laid out once, as the CPU runner lays out host memory:
weights uploaded once into one device blob, intermediates in one device arena (the same
static memory plan), the model's inputs and outputs staged in device arrays kept between
calls. A call copies the inputs in, launches every kernel, and copies the outputs out."""
from __future__ import annotations

import threading
import time

import numpy as np

from ..backend import args_info
from ..schedule.primitives.layout import PACKED
from ..tir import dtype as dt
from .planner import ModelPlan


def build_cuda_model(plan: ModelPlan) -> "CudaModel":
    """A CudaModel of the plan: each kernel's artifact loaded (a verified record's module is
    the one that was checked), run in order on one device memory layout."""
    steps = []
    for g in plan.groups:
        k = plan.of(g)
        if k.module is None:
            k.module = plan.backend.load(k.artifact, args_info(k.func))
        steps.append((k.module, k.func))
    return CudaModel(plan.graph, steps, plan.memory, plan.desc)


class _View:
    """A device address seen as an array of one shape and dtype (an argument of a kernel)."""

    def __init__(self, ptr: int, shape, dtype):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": np.dtype(dtype).str,
                                         "data": (int(ptr), False), "strides": None,
                                         "version": 3}


class CudaModel:
    """A model compiled for an NVIDIA GPU: `model(*numpy_inputs)` returns its outputs as
    numpy arrays. `model.profile(*inputs)` times each kernel with CUDA events."""

    def __init__(self, graph, steps: list, plan, desc: dict, *, device: int = 0):
        """`steps`: (CudaModule, its scheduled PrimFunc) per group of `plan`, in order."""
        from ..runtime.cuda import DeviceArray
        self.desc, self.device = desc, device
        self._in_specs = [(v.name, tuple(v.shape), dt.numpy_dtype(v.dtype)) for v in graph.inputs]
        self._out_specs = [(v.name, tuple(v.shape), dt.numpy_dtype(v.dtype))
                           for v in graph.outputs]
        self._inputs = [DeviceArray(s, d, device=device) for _, s, d in self._in_specs]
        self._outputs = [DeviceArray(s, d, device=device) for _, s, d in self._out_specs]
        self._arena = DeviceArray((max(plan.arena_bytes, 1),), np.uint8, device=device)
        # one call at a time: inputs, outputs and arena are device buffers every call shares
        # (the GPU runs one model's kernels in order on one stream anyway)
        self._busy = threading.Lock()
        self._weights = DeviceArray((max(len(plan.blob), 1),), np.uint8, device=device)
        if plan.blob:
            self._weights.copy_from(np.frombuffer(plan.blob, np.uint8))
        self._copies, self._out_slots = plan.copies, plan.out_slots
        self._graph_inputs = {id(v): i for i, v in enumerate(graph.inputs)}
        self._launches = []  # (module, its packed launches, output name)
        for (mod, func), (ins, out) in zip(steps, plan.steps):
            packed = dict(func.attr(PACKED, ()))
            ptrs = [self._address(v, plan, packed.get(i, 0)) for i, v in enumerate(ins + [out])]
            views = [_View(p, a.shape, dt.numpy_dtype(a.dtype)) for p, a in zip(ptrs, mod.args)]
            ptrs, _ = mod.arguments(views)  # checks shapes, dtypes, alignment and overlaps
            self._launches.append((mod, mod.packed(ptrs), out.name))

    def _address(self, v, plan, factor: int) -> int:
        if id(v) in plan.in_slot:
            return self._inputs[plan.in_slot[id(v)]].ptr
        if id(v) in plan.out_slots:
            return self._outputs[plan.out_slots[id(v)] - len(self._inputs)].ptr
        if v.is_const:
            return self._weights.ptr + plan.weight_offsets[(id(v), factor)]
        return self._arena.ptr + plan.arena[id(v)]

    # ------------------------------------------------------------------ calling
    def _load(self, inputs) -> list:
        if len(inputs) != len(self._in_specs):
            names = ", ".join(n for n, _, _ in self._in_specs)
            raise TypeError(f"model {self.desc['name']} takes {len(self._in_specs)} inputs "
                            f"({names}), got {len(inputs)}")
        hosts = []
        for (name, shape, dtype), x, dev in zip(self._in_specs, inputs, self._inputs):
            a = np.asarray(x)
            if a.shape != shape:
                raise ValueError(f"input {name} must have shape {shape}, got {a.shape}")
            if a.dtype != dtype:
                raise TypeError(f"input {name} must have dtype {dtype}, got {a.dtype}; "
                                f"convert with .astype('{dtype}')")
            dev.copy_from(a)
            hosts.append(a)
        return hosts

    def _run(self, timed: bool = False) -> list:
        from ..runtime.cuda import synchronize
        secs = []
        for mod, packed, _ in self._launches:
            t0 = time.perf_counter()
            mod.launch_packed(packed)
            if timed:
                synchronize(self.device)
                secs.append(time.perf_counter() - t0)
        synchronize(self.device)
        return secs

    def __call__(self, *inputs):
        with self._busy:
            hosts = self._load(inputs)
            self._run()
            outs = [dev.numpy() for dev in self._outputs]
        for j, src in self._copies:  # outputs that are an input, a weight or another output
            if id(src) in self._graph_inputs:
                outs[j] = np.array(hosts[self._graph_inputs[id(src)]], copy=True)
            elif src.is_const:
                outs[j] = np.asarray(src.data, dtype=src.dtype).copy()
            else:
                outs[j] = outs[self._out_slots[id(src)] - len(self._inputs)].copy()
        return outs[0] if len(outs) == 1 else tuple(outs)

    def profile(self, *inputs, repeat: int = 10) -> list[dict]:
        """Per kernel: {"kernel", "output", "ms"} (median of `repeat` runs, each kernel
        synchronized on its own)."""
        with self._busy:
            self._load(inputs)
            runs = [self._run(timed=True) for _ in range(repeat)]
        return [{"kernel": step["kernel"], "output": name,
                 "ms": float(np.median([r[i] for r in runs])) * 1e3}
                for i, (step, (_, _, name)) in enumerate(zip(self.desc["steps"],
                                                              self._launches))]

    def __repr__(self) -> str:
        return (f"CudaModel({self.desc['name']}: {self.desc['kernels']} kernels, "
                f"{nbytes_text(self.desc['arena_bytes'])} of intermediates, "
                f"{nbytes_text(self.desc['weights_bytes'])} of weights)")


def nbytes_text(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"

