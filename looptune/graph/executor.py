"""A compiled model: one native call per inference, exportable and loadable.

    compiled = looptune.compile_model(graph, database)
    y = compiled(x)                      # numpy in, numpy out
    compiled.export("resnet18.lt")       # a directory: model.so + model.json
    again = looptune.load("resnet18.lt") # in another process, without tuning

Intermediates live in one arena per loaded library, allocated on the first call: a compiled
model runs one call at a time (call it from one thread, or load it once per thread).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from ..runtime.module import ArgInfo, Module

LIB, DESC = "model.so", "model.json"
FORMAT_VERSION = 2  # of the exported description


class ModelError(ValueError):
    """Inputs that do not fit the model, or an export that cannot be loaded."""


class CompiledModel:
    def __init__(self, lib_path, desc: dict):
        self.lib_path = Path(lib_path)
        self.desc = desc
        self.inputs = [(d["name"], tuple(d["shape"]), d["dtype"]) for d in desc["inputs"]]
        self.outputs = [(d["name"], tuple(d["shape"]), d["dtype"]) for d in desc["outputs"]]
        args = [ArgInfo(n, s, t, False) for n, s, t in self.inputs] + \
               [ArgInfo(n, s, t, True) for n, s, t in self.outputs]
        # a model runs long on small inputs: other threads run meanwhile
        self.module = Module(self.lib_path, "lt_model", args, "", release_gil=True)
        self.set_num_threads(desc.get("num_threads", 0))

    @property
    def num_threads(self) -> int:
        return self.module.num_threads

    def set_num_threads(self, n: int) -> None:
        self.module.set_num_threads(int(n))

    def _input(self, i: int, x) -> np.ndarray:
        name, shape, dtype = self.inputs[i]
        a = x if isinstance(x, np.ndarray) else np.asarray(x)
        if a.shape != shape:
            raise ModelError(f"input {i} ({name}) must have shape {shape}, got {a.shape}")
        if a.dtype != dtype:
            kind_ok = (a.dtype.kind in "iu" and dtype.startswith("int")) or \
                      (a.dtype.kind == "f" and dtype.startswith("float"))
            if not kind_ok:
                raise ModelError(f"input {i} ({name}) must be {dtype}, got {a.dtype}")
            a = a.astype(dtype)
        return np.asarray(a, order="C")  # np.ascontiguousarray made a 0-d input 1-d

    def __call__(self, *inputs):
        if len(inputs) != len(self.inputs):
            names = ", ".join(n for n, _, _ in self.inputs)
            raise ModelError(f"the model takes {len(self.inputs)} inputs ({names}), got "
                             f"{len(inputs)}")
        args = [self._input(i, x) for i, x in enumerate(inputs)]
        outs = [np.empty(s, t) for _, s, t in self.outputs]
        self.module(*args, *outs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run_into(self, inputs, outputs) -> None:
        """Run with caller-owned arrays (exact shapes and dtypes): no allocation."""
        self.module(*inputs, *outputs)

    def profile(self, *inputs, repeat: int = 10) -> list[dict]:
        """Each kernel's time inside the running model (median of `repeat` runs after one
        warm-up, so caches hold what a real inference leaves in them), in call order:
        [{"kernel", "output", "ms"}]."""
        import ctypes
        args = [self._input(i, x) for i, x in enumerate(inputs)]
        if len(args) != len(self.inputs):
            raise ModelError(f"the model takes {len(self.inputs)} inputs, got {len(args)}")
        outs = [np.empty(s, t) for _, s, t in self.outputs]
        ptrs = self.module._pack(args + outs)
        fn = self.module._lib.lt_model_profile
        fn.restype, fn.argtypes = ctypes.c_int32, [ctypes.c_void_p, ctypes.c_void_p]
        steps = self.desc["steps"]
        ms = np.zeros((repeat + 1, len(steps)))
        for r in range(repeat + 1):
            rc = fn(ptrs, ms[r].ctypes.data)
            if rc != 0:
                raise ModelError(f"the model failed with status {rc}")
        med = np.median(ms[1:], axis=0)
        return [dict(step, ms=float(t)) for step, t in zip(steps, med)]

    def export(self, path) -> Path:
        """Write the model to directory `path` (model.so, model.json); `looptune.load(path)`
        runs it later, without tuning or compiling."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.lib_path, path / LIB)
        (path / DESC).write_text(json.dumps(self.desc, indent=2) + "\n")
        return path

    def __repr__(self) -> str:
        tuned = sum(t["tuned"] for t in self.desc.get("tasks", []))
        return (f"CompiledModel({self.desc.get('name')}: {self.desc['kernels']} kernels, "
                f"{len(self.desc.get('tasks', []))} tasks ({tuned} tuned), "
                f"{self.desc['arena_bytes'] / 1e6:.1f} MB arena, "
                f"{self.desc['weights_bytes'] / 1e6:.1f} MB weights, "
                f"{self.num_threads} threads)")


def load(path) -> CompiledModel:
    """A model written by CompiledModel.export."""
    path = Path(path)
    if not (path / LIB).exists() or not (path / DESC).exists():
        raise ModelError(f"{path} is not an exported looptune model (it needs {LIB} and "
                         f"{DESC}); write one with compiled.export(path)")
    desc = json.loads((path / DESC).read_text())
    if desc.get("format") != FORMAT_VERSION:
        raise ModelError(f"{path} has model format {desc.get('format')}, this looptune reads "
                         f"{FORMAT_VERSION}; export it again")
    return CompiledModel(path / LIB, desc)
