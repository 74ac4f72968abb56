"""A compiled kernel loaded into this process: call it with numpy arrays, time it."""
from __future__ import annotations

import ctypes
import numbers
import os
import statistics
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..error import INDEX_ERROR_STATUS, BuildError, IndexRangeError, RunError
from ..target import host
from ..tir import dtype as dt
from .call import MISMATCH, fast_call, install_c_method
from .compiler import damage, read_meta
from .ndarray import Placer, rotated_offsets
from .timer import calibrate, timer_lib


@dataclass(frozen=True)
class ProfileResult:
    """Seconds per call, one entry per repeat."""

    results: tuple

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.results) if len(self.results) > 1 else 0.0

    def __str__(self):
        return (f"median {self.median * 1e3:.4f} ms, mean {self.mean * 1e3:.4f} ms, "
                f"min {self.min * 1e3:.4f} ms over {len(self.results)} repeats")


@dataclass(frozen=True)
class ArgInfo:
    """A kernel argument. `index_bound` > 0: an integer input the kernel uses as indices into
    an axis of that size, so random test inputs (ndarray.random_args) stay below it."""

    name: str
    shape: tuple
    dtype: str
    written: bool
    index_bound: int = 0

    def to_json(self) -> dict:
        d = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
             "written": self.written}
        return {**d, "index_bound": self.index_bound} if self.index_bound else d

    @staticmethod
    def from_json(d) -> "ArgInfo":
        return ArgInfo(d["name"], tuple(d["shape"]), d["dtype"], bool(d["written"]),
                       int(d.get("index_bound", 0)))


def check_runs_here(lib_path) -> None:
    """BuildError unless the library is whole and this machine has the ISA it was built for
    (what compile_shared wrote beside it): a truncated library dies on SIGBUS, and code for
    an ISA the CPU lacks on an illegal instruction, or worse, in the middle of a run."""
    problem = damage(lib_path)
    if problem:
        raise BuildError(f"{lib_path}: {problem}; it is not loaded. Build it again (a cached "
                         "kernel is rebuilt by its next compile)")
    isa = (read_meta(lib_path) or {}).get("isa")
    if not isa:
        return
    here = host()
    missing = here.lacks(isa)
    if missing:
        raise BuildError(f"{lib_path} was built for {', '.join(missing)}, which this machine "
                         f"({here.model or here.arch}) lacks; it is not loaded. Build it again "
                         "here (target='cpu' is this machine), or run it where it was built")


def thread_count(n, source: str) -> int:
    """`n` as the thread count of parallel loops: a whole number >= 1 (RunError otherwise),
    at most this machine's CPUs. OpenMP allocates per thread asked for: 10**9 threads from a
    record or a JSON file would end the process ("libgomp: Out of memory"), so more than the
    machine has become as many as it has, with a warning naming `source`."""
    whole = isinstance(n, numbers.Integral) or (isinstance(n, float) and n.is_integer())
    if isinstance(n, bool) or not whole or n < 1:  # 1e9 from JSON is a float, and whole
        raise RunError(f"the thread count from {source} must be a whole number >= 1, got "
                       f"{n!r}; pass the threads to use (e.g. os.cpu_count())")
    cpus = os.cpu_count() or 1
    if n > cpus:
        warnings.warn(f"the thread count {n} from {source} is more than this machine's {cpus} "
                      f"CPUs; using {cpus}", RuntimeWarning, stacklevel=3)
        return cpus
    return int(n)


class Module:
    """`mod(*arrays)` runs the kernel, writing outputs in place; `mod.source` is its C. A
    library built for an ISA this machine lacks is refused (BuildError) before it loads.

    `release_gil`: whether other Python threads run while the kernel does; None (default):
    for arrays of 256 KiB or more (call.RELEASE_GIL_BYTES), where it costs nothing to speak
    of. Pass True where a thread must run even beside a kernel that hangs."""

    def __init__(self, lib_path: Path, symbol: str, args: list[ArgInfo], source: str,
                 source_path: Path | None = None, *, release_gil: bool | None = None):
        self.lib_path = Path(lib_path)
        self.symbol = symbol
        self.args = list(args)
        self.source = source
        self.source_path = source_path
        check_runs_here(self.lib_path)
        self._lib = ctypes.CDLL(str(self.lib_path))
        self._fn = getattr(self._lib, f"{symbol}_packed")
        self._fn.restype = ctypes.c_int32
        self._fn.argtypes = [ctypes.c_void_p]
        # a kernel's thread-count setter carries its symbol (so that kernels link together);
        # a model's runner has the one lt_set_num_threads
        self._set_threads = (getattr(self._lib, f"{symbol}_set_num_threads", None)
                             or getattr(self._lib, "lt_set_num_threads", None))
        self.num_threads = 0  # not set: OpenMP's default (usually all cores)
        # ((position, spec), ...): arguments the kernel takes packed (schedule.pack_layout;
        # the backend sets it from the function's "packed_params")
        self.packed_params: tuple = ()
        # the fast call (call.py): C checks the arrays and runs the kernel; None: Python does
        self._call = fast_call(ctypes.cast(self._fn, ctypes.c_void_p).value, self.args,
                               release_gil=release_gil)
        install_c_method(Module)

    def set_num_threads(self, n: int, *, source: str = "set_num_threads") -> None:
        """Threads for parallel loops; every thread count reaches the C code here, checked
        and clamped by thread_count (`source`: where `n` came from, for its messages)."""
        n = thread_count(n, f"{source} ({self.symbol})")
        if self._set_threads is not None:
            self._set_threads(n)
        self.num_threads = n

    def pack(self, *arrays) -> list:
        """The arrays in the layout the kernel takes: those it takes packed (`packed`) packed
        (runtime.ndarray.pack_array), the others as they are. Pack a constant (a weight)
        once, then call the kernel with the packed copy."""
        from .ndarray import pack_args
        return pack_args(list(arrays), self.packed_params)

    def _pack(self, arrays):
        if len(arrays) != len(self.args):
            names = ", ".join(a.name for a in self.args)
            raise RunError(f"{self.symbol} takes {len(self.args)} arrays ({names}), got {len(arrays)}")
        ptrs = (ctypes.c_void_p * len(arrays))()
        spans = []
        for i, (info, a) in enumerate(zip(self.args, arrays)):
            if not isinstance(a, np.ndarray):
                raise RunError(f"argument {info.name} must be a numpy array, got {type(a).__name__}")
            want = dt.numpy_name(info.dtype)
            if a.dtype != np.dtype(want):
                raise RunError(f"argument {info.name} must have dtype {want}, got {a.dtype}; "
                               f"convert with .astype('{want}')")
            if a.shape != tuple(info.shape):
                how = dict(self.packed_params).get(i)
                raise RunError(f"argument {info.name} must have shape {tuple(info.shape)}, got "
                               f"{a.shape}" + ("" if how is None else
                                               f": the kernel takes it packed (pack_layout "
                                               f"{how}); pass the arrays of mod.pack(*arrays)"))
            if not a.flags.c_contiguous:
                raise RunError(f"argument {info.name} must be C-contiguous; pass "
                               "np.ascontiguousarray(x)")
            if info.written and not a.flags.writeable:
                raise RunError(f"argument {info.name} is an output and must be writeable")
            start = a.ctypes.data
            spans.append((start, start + a.nbytes, info))
            ptrs[i] = start
        for j, (s1, e1, a1) in enumerate(spans):
            for s2, e2, a2 in spans[j + 1:]:
                if (a1.written or a2.written) and s1 < e2 and s2 < e1:
                    raise RunError(f"arguments {a1.name} and {a2.name} overlap in memory; the "
                                   "kernel assumes distinct buffers (pass a copy)")
        return ptrs

    def _call_in_python(self, *arrays) -> None:
        call = self._call
        rc = MISMATCH if call is None else call(arrays)
        if rc:
            self._checked_call(arrays, rc)

    # once call.py's extension is built (the first Module does it), its C method, which does
    # the same without this frame, is Module.__call__ instead
    __call__ = _call_in_python

    def _checked_call(self, arrays, rc: int) -> None:
        """After the fast path: arguments it did not accept are checked in Python (with the
        messages of _pack) and the kernel called; a kernel's own failure is raised."""
        if rc == MISMATCH:
            rc = self._fn(self._pack(arrays))
        if rc != 0:
            raise self.failure(rc)

    def failure(self, rc: int) -> RunError:
        """The error of a call that returned status `rc`: IndexRangeError for an index out of
        range (what `<symbol>_index_error` in the library says of it), else RunError."""
        query = getattr(self._lib, f"{self.symbol}_index_error", None)
        if not INDEX_ERROR_STATUS <= rc < MISMATCH or query is None:
            return RunError(f"{self.symbol} failed with status {rc} (out of memory?)")
        info, names = (ctypes.c_int64 * 5)(), (ctypes.c_char_p * 3)()
        query.restype = ctypes.c_int32
        if not query(info, names):
            return RunError(f"{self.symbol} failed with status {rc} (an index out of range)")
        value, axis, size, wrap, _ = (int(v) for v in info)
        buffer, kernel, node = (n.decode("utf-8", "replace") if n else "" for n in names)
        lo = -size if wrap else 0
        where = f"kernel {kernel}" + (f" (node {node})" if node else "")
        return IndexRangeError(
            f"{where}: index {value} is out of range for axis {axis} of {buffer} (size {size}; "
            f"valid indices are {lo} to {size - 1}); the call's outputs are not valid. Fix the "
            "indices passed in", kernel=kernel, buffer=buffer, axis=axis, size=size, value=value)

    @property
    def entry_name(self) -> str:
        """The kernel's name (TVM's `func.entry_name`, for time_evaluator)."""
        return self.symbol

    def time_evaluator(self, func_name: str | None = None, dev=None, *, number: int = 10,
                       repeat: int = 3, min_repeat_ms: float = 0,
                       enable_cpu_cache_flush: bool = False, flush_bytes: int | None = None,
                       warm_up: bool = True, arg_offsets=None, stop_above: float | None = None,
                       calls_from: str = "c", placement=None):
        """A function of the same arrays that returns ProfileResult (seconds per call).

        One warm-up call first (`warm_up=False`: the caller has just made one); each repeat
        times `number` calls - in a C loop (`calls_from="c"`), or as a user makes them, in a
        Python loop of `module(*arrays)` (`"python"`: the call's own cost and what the
        interpreter does to the caches between calls count) - with `number` raised until a repeat lasts at least
        `min_repeat_ms` (the calibration run that does is the first repeat); with cache
        flush, caches are flushed before every repeat (use number=1 to time cold-cache
        calls). With `arg_offsets` (byte offsets from a 64-byte
        boundary, e.g. ndarray.NUMPY_OFFSETS), each repeat runs on copies of the arrays placed
        at rotating offsets (ndarray.rotated_offsets), as ordinary numpy arrays lie; with
        `placement` (one byte offset per argument) instead, every repeat runs on copies at
        those offsets. With `stop_above` (seconds per call), a first repeat slower than that
        is the only one.
        TVM's positional `(func.entry_name, dev)` are accepted: the module has one kernel."""
        if func_name is not None and func_name != self.symbol:
            raise RunError(f"time_evaluator: this module's kernel is {self.symbol!r}, not "
                           f"{func_name!r}; pass mod.entry_name")
        if number < 1 or repeat < 1:
            raise RunError(f"time_evaluator: number and repeat must be at least 1, got "
                           f"number={number}, repeat={repeat}")
        if calls_from not in ("c", "python"):
            raise RunError(f"time_evaluator: calls_from must be 'c' or 'python', got "
                           f"{calls_from!r}")

        def run(*arrays) -> ProfileResult:
            placed = list(arrays)
            ptrs = self._pack(arrays)
            rotating = bool(arg_offsets) and placement is None
            if rotating or placement is not None:
                if placement is not None and len(placement) != len(arrays):
                    raise RunError(f"time_evaluator: placement gives {len(placement)} offsets "
                                   f"for {len(arrays)} arguments")
                placer = Placer(arrays)
                placed = placer.at(placement if placement is not None
                                   else rotated_offsets(arg_offsets, len(arrays), 0))
                ptrs = self._pack(placed)
            lib = timer_lib()
            status = ctypes.c_int32(0)
            fn_ptr = ctypes.cast(self._fn, ctypes.c_void_p)

            def timed(n: int) -> float:
                if calls_from == "python":
                    args = tuple(placed)
                    t0 = time.perf_counter()
                    for _ in range(n):
                        self(*args)
                    return time.perf_counter() - t0
                t = lib.lt_time_packed(fn_ptr, ptrs, n, ctypes.byref(status))
                if status.value != 0:
                    raise self.failure(status.value)
                return t

            if warm_up:
                timed(1)
            n, t = calibrate(timed, number, min_repeat_ms)
            # the last calibration is a full first repeat (not with a cache flush before it)
            results = [t / n] if t is not None and not enable_cpu_cache_flush else []
            if stop_above is not None and results and results[0] > stop_above:
                return ProfileResult(tuple(results))
            fb = flush_bytes if flush_bytes is not None else 64 << 20
            for r in range(len(results), repeat):
                if rotating and r > 0:
                    placed = placer.at(rotated_offsets(arg_offsets, len(arrays), r))
                    ptrs = self._pack(placed)
                if enable_cpu_cache_flush:
                    lib.lt_flush_cache(fb)
                results.append(timed(n) / n)
            return ProfileResult(tuple(results))

        return run

    def __repr__(self):
        return f"Module({self.symbol}, {self.lib_path.name})"
