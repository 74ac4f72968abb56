"""A compiled model: one native call per inference, exportable and loadable.

    compiled = looptune.compile_model(graph, database)
    y = compiled(x)                      # numpy in, numpy out
    compiled.export("resnet18.lt")       # a directory: model.json + the library it names
    again = looptune.load("resnet18.lt") # in another process, without tuning

Export and load (checked: format version, hashes, ISA) live in export.py. Intermediates live
in one arena per loaded library, allocated on the first call: a compiled model runs one call
at a time (call it from one thread, or load it once per thread).
"""
from __future__ import annotations

import ctypes
import hashlib
import json
from pathlib import Path

import numpy as np

from ..runtime.module import ArgInfo, Module

# of the description: 3 added the library's file name and hash, the ISA and the hash of
# what the library was built for
FORMAT_VERSION = 3
# what the library's code depends on: the description's part that its hash covers
SEMANTIC_KEYS = ("name", "inputs", "outputs", "kernels", "steps", "arena_bytes",
                 "weights_bytes", "weights_sha256", "isa")


class ModelError(ValueError):
    """Inputs that do not fit the model, or an export that cannot be loaded."""


def semantic_hash(desc: dict) -> str:
    """The hash of what a model's library was built for (SEMANTIC_KEYS of its description:
    shapes, dtypes, kernels, memory, weights, ISA). The library returns it from `lt_model_hash()`, so
    a description edited after the build, or paired with another model's library, is
    refused instead of running past the ends of its buffers."""
    part = {k: desc.get(k) for k in SEMANTIC_KEYS}
    return hashlib.sha256(json.dumps(part, sort_keys=True).encode()).hexdigest()


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
        self._check_library()
        self.set_num_threads(desc.get("num_threads", 0))

    def _check_library(self) -> None:
        """ModelError unless the library was built for this description (its lt_model_hash)."""
        fn = getattr(self.module._lib, "lt_model_hash", None)
        built_for = None
        if fn is not None:
            fn.restype, fn.argtypes = ctypes.c_char_p, []
            built_for = fn().decode()
        if built_for != semantic_hash(self.desc):
            raise ModelError(f"{self.lib_path} belongs to another model than its description "
                             "(the shapes, kernels or memory plan it was built for differ); "
                             "export the model again")

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
        return np.ascontiguousarray(a)

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
        """Write the model to directory `path` (model.json and the library it names);
        `looptune.load(path)` runs it later, without tuning or compiling. Safe while other
        processes run or export the model at `path` (export.py)."""
        from .export import export_model
        return export_model(self, path)

    def __repr__(self) -> str:
        tuned = sum(bool(t.get("tuned")) for t in self.desc.get("tasks", []))
        return (f"CompiledModel({self.desc.get('name')}: {self.desc['kernels']} kernels, "
                f"{len(self.desc.get('tasks', []))} tasks ({tuned} tuned), "
                f"{self.desc['arena_bytes'] / 1e6:.1f} MB arena, "
                f"{self.desc['weights_bytes'] / 1e6:.1f} MB weights, "
                f"{self.num_threads} threads)")

