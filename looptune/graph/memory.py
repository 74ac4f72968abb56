"""The static memory plan of a compiled model: where every intermediate tensor lives.

Kernels run in order; each intermediate is live from the kernel that writes it to the last
kernel that reads it. Intermediates whose lives do not overlap share bytes of one arena
(first fit, 64-byte aligned); weights are packed into one read-only blob.
"""
from __future__ import annotations

import numpy as np

ALIGN = 64


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def nbytes(v) -> int:
    return int(np.prod(v.shape, dtype=np.int64)) * np.dtype(v.dtype).itemsize


def plan_arena(steps: list, outputs: set) -> tuple[dict, int]:
    """steps: per kernel (inputs, output) Values in run order. Returns ({id(value): offset}
    for the intermediates (values written by a kernel that are not in `outputs`), arena
    bytes)."""
    last_use: dict = {}
    for i, (ins, _) in enumerate(steps):
        for v in ins:
            last_use[id(v)] = i
    live: list = []      # (offset, size, last step)
    offsets: dict = {}
    total = 0
    for i, (_, out) in enumerate(steps):
        live = [x for x in live if x[2] >= i]  # freed once their last reader ran
        if id(out) in outputs:
            continue
        size = _aligned(max(nbytes(out), 1))
        end = last_use.get(id(out), i)
        offset, prev_end = 0, 0
        for off, sz, _ in sorted(live):
            if off - prev_end >= size:
                break
            prev_end = max(prev_end, off + sz)
        offset = prev_end
        offsets[id(out)] = offset
        live.append((offset, size, end))
        total = max(total, offset + size)
    return offsets, total


def pack_weights(constants: list) -> tuple[dict, bytes]:
    """({key: offset}, the blob) for (key, numpy array) pairs, each 64-byte aligned."""
    offsets, parts, pos = {}, [], 0
    for key, a in constants:
        data = np.ascontiguousarray(a).tobytes()
        offsets[key] = pos
        pad = _aligned(len(data)) - len(data)
        parts.append(data + b"\0" * pad)
        pos += len(data) + pad
    return offsets, b"".join(parts)
