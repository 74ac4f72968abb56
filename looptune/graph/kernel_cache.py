"""The untuned kernels of compiled models, cached across processes: a task's default schedule
(dlight), lowered, rendered and compiled once; a later compile of a model with the same task
reads the scheduled function and the artifact back instead of scheduling, lowering and
rendering again (what dominated a warm compile_model: seconds of Python per model).

The key holds the task's workload key and name (the kernel's symbol), the target, the C
compiler's version and extra flags, and a fingerprint of looptune's own source code, so a
change to a rule, a lowering pass or the renderer never reuses a stale kernel. An entry
whose artifact has gone, or does not hash as compile_shared recorded, is a miss.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path

from .. import env
from ..backend import Artifact
from ..runtime.compiler import ARTIFACT_FORMAT, compiler_version, damage, read_meta
from ..tir.serialize import func_from_json, func_to_json

FORMAT = 1


@lru_cache(maxsize=None)
def code_fingerprint() -> str:
    """A hash of every looptune source file's name, size and modification time (reading
    them all took most of a second): what a cached kernel was made by."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        st = path.stat()
        h.update(f"{path.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def entry_key(task, target) -> str:
    parts = [str(FORMAT), task.key, task.task_name, json.dumps(target.to_json(), sort_keys=True),
             code_fingerprint(), compiler_version(env.cc()), " ".join(env.extra_cflags())]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _path(task, target) -> Path:
    return env.cache_dir() / "default_kernels" / f"{entry_key(task, target)}.json"


def load(task, target):
    """(scheduled PrimFunc, Artifact) of the task's cached default kernel, or None."""
    try:
        d = json.loads(_path(task, target).read_text())
        artifact = Artifact(**d["artifact"])
        if not Path(artifact.path).exists() or (
                artifact.object_path and not Path(artifact.object_path).exists()):
            return None
        # the library and the object a model links must be whole: else compile again
        meta = read_meta(artifact.path)
        if not meta or meta.get("format") != ARTIFACT_FORMAT or damage(artifact.path, ("so", "o")):
            return None
        return func_from_json(d["func"]), artifact
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(task, target, func, artifact: Artifact) -> None:
    d = {"format": FORMAT, "task": task.task_name, "func": func_to_json(func),
         "artifact": {"kind": artifact.kind, "path": artifact.path, "symbol": artifact.symbol,
                      "isa": artifact.isa, "object_path": artifact.object_path}}
    path, tmp = _path(task, target), None
    try:  # written whole under another name, then renamed: readers never see half a file
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(d))
        os.replace(tmp, path)
    except OSError:  # a cache that cannot be written is only slower
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
