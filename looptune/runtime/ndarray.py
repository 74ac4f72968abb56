"""Arrays for kernels: seeded random arguments, 64-byte aligned ones, copies placed where
numpy's own allocator puts arrays, and the rule that compares a kernel's output with its
reference (`compare`).

Alignment matters to some kernels and not to others: on an AMD Zen 5 (AVX-512), sampled
matmul_add 1024 kernels ran from 0.83x to 1.7x their aligned time with every array at a 16,
32 or 48-byte offset, dense 784->256 ones up to 1.2x, conv2d ones about +-10%; on an Intel
Ice Lake a tuned matmul took 38.6 ms aligned and 74 ms on numpy's arrays. numpy (2.x, glibc
malloc) starts an array at any multiple of 16 bytes mod 64, large ones included, and users
pass such arrays. So the runner times kernels the way users call them: each repeat places
the arguments at other offsets (`NUMPY_OFFSETS`, see `placed`), the record is the median,
and the search prefers kernels that are fast wherever the data starts. Aligned arrays
(`aligned`, `empty`) need no special care and are not needed for speed."""
from __future__ import annotations

import numpy as np

from ..tir import dtype as dt

ALIGN = 64
NUMPY_OFFSETS = (0, 16, 32, 48)  # where numpy's arrays start, mod 64 (malloc: 16-byte aligned)
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


def pack_last_axis(a: np.ndarray, factor: int) -> np.ndarray:
    """`a` (d0, .., dn) in the layout of schedule.pack_layout: (ceil(dn / factor), d0, ..,
    dn-1, factor), zero-padded, 64-byte aligned."""
    n = a.shape[-1]
    blocks = -(-n // factor)
    if blocks * factor != n:
        pad = [(0, 0)] * (a.ndim - 1) + [(0, blocks * factor - n)]
        a = np.pad(a, pad)
    out = a.reshape(*a.shape[:-1], blocks, factor)
    return aligned(np.moveaxis(out, -2, 0))


def pack_axis(a: np.ndarray, factor: int, axis: int) -> np.ndarray:
    """`a` with `axis` cut into blocks of `factor` (zero-padded), the block index outermost
    and the offset in place: schedule.pack_layout's step."""
    n = a.shape[axis]
    blocks = -(-n // factor)
    if blocks * factor != n:
        pad = [(0, 0)] * a.ndim
        pad[axis] = (0, blocks * factor - n)
        a = np.pad(a, pad)
    out = a.reshape(*a.shape[:axis], blocks, factor, *a.shape[axis + 1:])
    return np.moveaxis(out, axis, 0)


def pack_array(a: np.ndarray, spec) -> np.ndarray:
    """`a` in the layout a "packed_params" spec describes (schedule.pack_layout: the factor
    of one last-axis packing, or the ((factor, axis), ...) steps), 64-byte aligned."""
    if isinstance(spec, int):
        return pack_last_axis(a, spec)
    for factor, axis in spec:
        a = pack_axis(a, factor, axis)
    return aligned(np.ascontiguousarray(a))


def pack_args(arrays: list, packed) -> list:
    """The arrays a function with attribute "packed_params" ((position, spec), ...) takes."""
    arrays = list(arrays)
    for pos, spec in packed:
        arrays[pos] = pack_array(arrays[pos], spec)
    return arrays


def random_args(args_info, seed: int) -> list:
    """Aligned arrays for one call: inputs from default_rng(seed) in argument order (floats
    uniform in [-1, 1), integers in [-8, 8), unsigned in [0, 8), indices in [0, index_bound)
    where the argument has one); outputs filled with NaN
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
        elif getattr(a, "index_bound", 0):  # indices: in range, or the kernel raises
            x = aligned(rng.integers(0, a.index_bound, shape).astype(np_dtype))
        else:
            low = 0 if dt.kind(a.dtype) == "uint" else -8
            x = aligned(rng.integers(low, 8, shape).astype(np_dtype))
        arrays.append(x)
    return arrays


class Placer:
    """Copies of a list of arrays at chosen byte offsets from a 64-byte boundary, reusing one
    buffer per array: `placer.at(offsets)` puts array i at `offsets[i]` (16: where numpy's
    malloc often starts data) and returns the views."""

    def __init__(self, arrays):
        self.arrays = list(arrays)
        self.raw = [np.empty(a.nbytes + 2 * ALIGN, np.uint8) for a in self.arrays]

    def at(self, offsets) -> list:
        out = []
        for a, raw, off in zip(self.arrays, self.raw, offsets):
            start = (-raw.ctypes.data) % ALIGN + off % ALIGN
            view = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
            view[...] = a
            out.append(view)
        return out


def rotated_offsets(offsets, n_args: int, r: int) -> tuple:
    """The offsets of the n arguments in repeat r: argument i at offsets[(r + i) % len], so
    successive repeats see different offsets and different combinations of them."""
    return tuple(offsets[(r + i) % len(offsets)] for i in range(n_args))


def compare(name: str, out: np.ndarray, ref: np.ndarray, rtol: float = 1e-3,
            atol: float = 1e-3) -> str | None:
    """None if `out` matches `ref`, else what is wrong: the one rule by which every check of
    a kernel against its reference judges (the tuner's runners, compile_tir's verification,
    the fuzzer), so what one accepts the others accept. Floats: where the reference is NaN,
    NaN; where it is an infinity, the same infinity; elsewhere within rtol and atol scaled by
    max(1, max finite |ref|) (an infinite scale would accept anything). Integers and booleans:
    exactly equal."""
    o, r = out.astype(np.float64), ref.astype(np.float64)
    if out.dtype.kind == "f":
        finite = np.abs(r[np.isfinite(r)])
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        with np.errstate(invalid="ignore", over="ignore"):
            close = np.isclose(o, r, rtol=rtol, atol=atol * scale)
        bad = np.where(np.isnan(r), ~np.isnan(o), np.where(np.isinf(r), o != r, ~close))
    else:
        bad = np.asarray(out != ref)
    n = int(bad.sum())
    if n == 0:
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(o[bad] - r[bad])
    diff = diff[np.isfinite(diff)]
    notes = [f"max abs difference {diff.max():.4g}"] if diff.size else []
    nan = int(np.isnan(o[bad]).sum())
    if nan:
        notes.append(f"{nan} are NaN: never written?")
    inf = int((np.isinf(r[bad]) | np.isinf(o[bad])).sum())
    if inf:
        notes.append(f"{inf} are infinite in one and not the same infinity in the other")
    if out.dtype.kind in "iu":
        unwritten = int((out == np.array(INT_SENTINEL).astype(out.dtype)).sum())
        if unwritten:
            notes.append(f"{unwritten} still hold the fill value: never written?")
    return f"{n} of {out.size} elements of {name} differ from the reference ({'; '.join(notes)})"
