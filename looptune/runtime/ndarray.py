"""Arrays for kernels: 64-byte aligned, as a framework's allocator gives them.

Alignment matters: an AVX2 matmul ran 2.2 ms on 64-byte aligned arrays and 3.3 ms on arrays
at a 16-byte offset (numpy's default allocation lands on either), so measurements always use
aligned arguments and `aligned` is offered to users."""
from __future__ import annotations

import numpy as np

from ..tir import dtype as dt

ALIGN = 64
INT_SENTINEL = -0x5A5A5A5A  # fills integer outputs so elements never written show up


def empty(shape, dtype="float32", align: int = ALIGN) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts on an `align`-byte boundary."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    raw = np.empty(n * dtype.itemsize + align, dtype=np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + n * dtype.itemsize].view(dtype).reshape(shape)


def aligned(a: np.ndarray, align: int = ALIGN) -> np.ndarray:
    """`a` itself if it is already aligned and C-contiguous, else an aligned copy."""
    if a.flags.c_contiguous and a.ctypes.data % align == 0:
        return a
    out = empty(a.shape, a.dtype, align)
    out[...] = a
    return out


def random_args(args_info, seed: int) -> list:
    """Aligned arrays for one call: inputs from default_rng(seed) in argument order (floats
    uniform in [-1, 1), integers in [-8, 8), unsigned in [0, 8)); outputs filled with NaN
    (floats) or a sentinel (integers) so elements the kernel never writes are caught."""
    rng = np.random.default_rng(seed)
    arrays = []
    for a in args_info:
        np_dtype = np.dtype(dt.numpy_name(a.dtype))
        shape = tuple(a.shape)
        if a.written:
            fill = np.nan if dt.is_float(a.dtype) else True if dt.is_bool(a.dtype) else \
                np.array(INT_SENTINEL).astype(np_dtype)
            x = empty(shape, np_dtype)
            x[...] = fill
        elif dt.is_float(a.dtype):
            x = aligned(rng.uniform(-1.0, 1.0, shape).astype(np_dtype))
        elif dt.is_bool(a.dtype):
            x = aligned(rng.integers(0, 2, shape).astype(np_dtype))
        else:
            low = 0 if dt.kind(a.dtype) == "uint" else -8
            x = aligned(rng.integers(low, 8, shape).astype(np_dtype))
        arrays.append(x)
    return arrays
