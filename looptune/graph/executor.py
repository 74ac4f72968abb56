"""A compiled model: one native call per inference, exportable and loadable.

    compiled = looptune.compile_model(graph, database)
    y = compiled(x)                      # numpy in, numpy out
    compiled.export("resnet18.lt")       # a directory: model.json + the library it names
    again = looptune.load("resnet18.lt") # in another process, without tuning

Export and load (checked: format version, hashes, ISA) live in export.py. Intermediates live
in an arena the call passes to the library, taken from the model's pool of free arenas (a new
one when every arena is in use): several threads may call one compiled model at once, each on
its own arena, and the native call runs without the GIL.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import threading
from pathlib import Path

import numpy as np

from ..runtime.limits import memory_problem
from ..runtime.module import ArgInfo, Module
from ..runtime.ndarray import empty

# of the description: 3 added the library's file name and hash, the ISA and the hash of
# what the library was built for, and the runner takes the arena as its last argument
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
    """A model compiled into one shared library (compile_model, or looptune.load of an exported
    one): call it with numpy arrays, from several threads at once if you like; `export`,
    `profile` and `set_num_threads` as needed."""

    def __init__(self, lib_path, desc: dict, *, threads_from: str = "the model's description"):
        """`threads_from`: where desc["num_threads"] came from (for its messages)."""
        self.lib_path = Path(lib_path)
        self.desc = desc
        self.inputs = [(d["name"], tuple(d["shape"]), d["dtype"]) for d in desc["inputs"]]
        self.outputs = [(d["name"], tuple(d["shape"]), d["dtype"]) for d in desc["outputs"]]
        self.arena_bytes = max(int(desc["arena_bytes"]), 64)
        problem = memory_problem(f"the model {desc.get('name')}", self.inputs + self.outputs,
                                 extra=[("the arena of intermediates", self.arena_bytes)])
        if problem:  # (its weights are in the library, loaded below)
            raise ModelError(problem)
        args = [ArgInfo(n, s, t, False) for n, s, t in self.inputs] + \
               [ArgInfo(n, s, t, True) for n, s, t in self.outputs] + \
               [ArgInfo("arena", (self.arena_bytes,), "uint8", True)]
        # a model runs long on small inputs: other threads run meanwhile
        self.module = Module(self.lib_path, "lt_model", args, "", release_gil=True)
        self._check_library()
        self._free_arenas: list = []  # arenas no call is using (list.pop/append are atomic)
        self._arena_count = 0
        self._arena_lock = threading.Lock()
        if desc.get("num_threads") is not None:
            self.module.set_num_threads(desc["num_threads"], source=threads_from)

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
        self.module.set_num_threads(n, source="CompiledModel.set_num_threads")

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
        self.run_into(args, outs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run_into(self, inputs, outputs) -> None:
        """Run with caller-owned arrays (exact shapes and dtypes): no allocation once as many
        arenas exist as calls run at once."""
        arena = self._take_arena()
        try:
            self.module(*inputs, *outputs, arena)
        finally:
            self._free_arenas.append(arena)

    @property
    def arenas(self) -> int:
        """How many arenas this model has made: the most calls that have run at once."""
        return self._arena_count

    def _take_arena(self) -> np.ndarray:
        """A free arena, or a new one (64-byte aligned, as the memory plan lays it out)."""
        try:
            return self._free_arenas.pop()
        except IndexError:
            with self._arena_lock:
                self._arena_count += 1
            return empty((self.arena_bytes,), "uint8")

    def profile(self, *inputs, repeat: int = 10) -> list[dict]:
        """Each kernel's time inside the running model (median of `repeat` runs after one
        warm-up, so caches hold what a real inference leaves in them), in call order:
        [{"kernel", "output", "ms"}]."""
        import ctypes
        args = [self._input(i, x) for i, x in enumerate(inputs)]
        if len(args) != len(self.inputs):
            raise ModelError(f"the model takes {len(self.inputs)} inputs, got {len(args)}")
        outs = [np.empty(s, t) for _, s, t in self.outputs]
        arena = self._take_arena()
        ptrs = self.module._pack(args + outs + [arena])
        fn = self.module._lib.lt_model_profile
        fn.restype, fn.argtypes = ctypes.c_int32, [ctypes.c_void_p, ctypes.c_void_p]
        steps = self.desc["steps"]
        ms = np.zeros((repeat + 1, len(steps)))
        try:
            for r in range(repeat + 1):
                rc = fn(ptrs, ms[r].ctypes.data)
                if rc != 0:
                    raise ModelError(f"the model failed with status {rc}")
        finally:
            self._free_arenas.append(arena)
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

