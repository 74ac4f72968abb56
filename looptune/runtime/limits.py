"""What a kernel or model needs in memory, checked before anything is built or allocated: a
tensor whose size overflows int64, or buffers that cannot fit in this machine's memory, are
refused up front with the tensor named, instead of failing later in malloc, in libgomp or at
the hands of the OOM killer (or, for an overflowing size, silently, with a wrapped one)."""
from __future__ import annotations

import math
import os

import numpy as np

from ..tir import dtype as dt

INT64_MAX = 2**63 - 1


def tensor_bytes(name: str, shape, dtype: str) -> tuple[int, str | None]:
    """(bytes of a `shape` tensor of `dtype`, None), or (0, why it cannot exist): a
    dimension that is not a whole number >= 0, or elements or bytes beyond int64 (the index
    arithmetic of the generated code)."""
    dims = []
    for d in shape:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 0:
            return 0, f"tensor {name} has shape {tuple(shape)}: a dimension is not a whole number >= 0"
        dims.append(int(d))
    n = math.prod(dims)  # Python ints: exact, where numpy's int64 product would wrap
    size = n * np.dtype(dt.numpy_name(dtype)).itemsize
    if n > INT64_MAX or size > INT64_MAX:
        return 0, (f"tensor {name} has shape {tuple(dims)}: {n} elements ({size} bytes) overflow "
                   "int64, which every index and size is computed in; split it into smaller "
                   "tensors")
    return size, None


def machine_memory() -> int:
    """Bytes of memory this process may use: the machine's physical memory (SC_PHYS_PAGES),
    or this container's limit (cgroup v2 memory.max) if lower."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return total


def gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**20 else f"{n} bytes"


def memory_problem(what: str, tensors, *, extra=()) -> str | None:
    """Why `what` cannot run here, or None. `tensors`: (name, shape, dtype) of each buffer it
    needs at once; `extra`: (description, bytes) of other memory (an arena, weights)."""
    parts = []
    for name, shape, dtype in tensors:
        size, problem = tensor_bytes(name, shape, dtype)
        if problem:
            return f"{what}: {problem}"
        parts.append((f"tensor {name} {tuple(shape)} {dtype}", size))
    parts += [(d, int(b)) for d, b in extra]
    need = sum(b for _, b in parts)
    have = machine_memory()
    if need <= have:
        return None
    desc, size = max(parts, key=lambda p: p[1])
    return (f"{what} needs {gib(need)} of memory, more than this machine's {gib(have)} "
            f"(the largest part: {desc}, {gib(size)}); make it smaller, or run it on a "
            "machine with more memory")
