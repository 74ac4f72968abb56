"""Run compiled kernels in a child process, so that one that crashes or hangs takes down only
the child (which is then replaced). Every argument lies between guard zones that are checked
after the call, and inputs are checked to be unchanged: writes out of bounds show up.

Protocol over one socket (multiprocessing.connection messages):
  child -> parent  ("ready", None)                    once, after start-up
  parent -> child  (library path, [KernelCall, ...])  a batch;  None: exit
  child -> parent  ("result", i, outcome)             one per call, in order
"""
from __future__ import annotations

import signal
import subprocess
import weakref
from dataclasses import dataclass

import numpy as np

from ..runtime.child import child_connection, kill_child, start_child, stop_child

_BOOT = ("import sys; from looptune.testing.sandbox import serve; "
         "serve(int(sys.argv[1]), int(sys.argv[2]))")
GUARD = 0xA5  # the byte guard zones are filled with
START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class KernelCall:
    """Call `symbol` with `inputs` (numpy arrays for the arguments not written, in order);
    outputs start as NaN (floats) or INT_SENTINEL and come back in the outcome."""

    symbol: str
    args: tuple      # runtime.ArgInfo per argument
    inputs: tuple


# outcomes: ("ok", [output arrays]) | ("wrong", message): it wrote out of bounds or into an
# input | ("error", message): it returned an error | ("crash", message): it killed the
# process or hung


class Sandbox:
    """`run(lib, calls)` calls each kernel in a child process and returns one outcome per
    call. Each call has `timeout_s` seconds; kernels run with `num_threads` threads."""

    def __init__(self, *, timeout_s: float = 10.0, num_threads: int = 2, recycle_after: int = 200):
        self.timeout_s = timeout_s
        self.num_threads = num_threads
        self.recycle_after = recycle_after  # libraries per child: bounds what one keeps loaded
        self._child: _Child | None = None

    def run(self, lib_path, calls: list) -> list:
        outcomes = []
        while len(outcomes) < len(calls):
            rest = calls[len(outcomes):]
            child = self._live_child()
            child.served += 1
            try:
                child.conn.send((str(lib_path), self.num_threads, rest))
                for _ in rest:
                    if not child.conn.poll(self.timeout_s):
                        raise _Lost(f"hang: no result within {self.timeout_s:g} s (killed)")
                    _, _, outcome = child.conn.recv()
                    outcomes.append(outcome)
            except (EOFError, OSError):
                self._discard()
                outcomes.append(("crash", _death_message(child.proc)))
            except _Lost as e:
                self._discard()
                outcomes.append(("crash", str(e)))
        return outcomes

    def close(self) -> None:
        if self._child is not None:
            self._child.stop()
            self._child = None

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _live_child(self) -> "_Child":
        c = self._child
        if c is not None and c.proc.poll() is None and c.served < self.recycle_after:
            return c
        self.close()
        self._child = _Child()
        return self._child

    def _discard(self) -> None:
        if self._child is not None:
            self._child.stop(kill=True)
            self._child = None


class _Lost(Exception):
    pass


def _death_message(proc) -> str:
    try:
        rc = proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    if rc is not None and rc < 0:
        try:
            return f"the kernel killed its process (signal {signal.Signals(-rc).name})"
        except ValueError:
            return f"the kernel killed its process (signal {-rc})"
    return f"the kernel's process exited (exit code {rc})"


class _Child:
    def __init__(self):
        # idle OpenMP threads sleep, not spin
        self.proc, self.conn = start_child(_BOOT, {"OMP_WAIT_POLICY": "passive"})
        self.served = 0
        self._finalizer = weakref.finalize(self, stop_child, self.proc, self.conn)
        if not self.conn.poll(START_TIMEOUT_S):
            self.stop(kill=True)
            raise RuntimeError(f"the kernel sandbox did not start within {START_TIMEOUT_S:g} s")
        self.conn.recv()

    def stop(self, *, kill: bool = False) -> None:
        if kill and self.proc.poll() is None:
            kill_child(self.proc)
        self._finalizer()


# ------------------------------------------------------------------------------ the child
def _guarded(shape, dtype):
    """(raw bytes, the array inside them, guard size): the array starts 64-byte aligned
    after a guard zone of at least 256 bytes, and one as long follows it."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    guard = max(256, -(-nbytes // 64) * 64)
    raw = np.full(2 * guard + nbytes + 64, GUARD, np.uint8)
    start = guard + (-raw[guard:].ctypes.data) % 64
    arr = raw[start:start + nbytes].view(dtype).reshape(shape)
    return raw, arr, (start, start + nbytes)


def call_guarded(mod, call: KernelCall):
    from ..runtime.error import RunError
    from ..runtime.ndarray import INT_SENTINEL
    from ..tir import dtype as dt
    arrays, raws, inputs = [], [], iter(call.inputs)
    for a in call.args:
        raw, arr, span = _guarded(tuple(a.shape), dt.numpy_name(a.dtype))
        if a.written:
            arr[...] = np.nan if dt.is_float(a.dtype) else np.array(INT_SENTINEL).astype(arr.dtype)
        else:
            arr[...] = next(inputs)
        arrays.append(arr)
        raws.append((raw, span))
    try:
        mod(*arrays)
    except RunError as e:
        return ("error", f"the kernel failed: {e}")
    for a, arr, (raw, (lo, hi)), x in zip(call.args, arrays, raws, _inputs_by_arg(call)):
        if (raw[:lo] != GUARD).any() or (raw[hi:] != GUARD).any():
            where = "before" if (raw[:lo] != GUARD).any() else "after"
            return ("wrong", f"the kernel wrote out of bounds, {where} argument {a.name}")
        if x is not None and not np.array_equal(arr, x, equal_nan=arr.dtype.kind == "f"):
            return ("wrong", f"the kernel changed its input {a.name}")
    return ("ok", [arr.copy() for a, arr in zip(call.args, arrays) if a.written])


def _inputs_by_arg(call: KernelCall):
    inputs = iter(call.inputs)
    return [None if a.written else next(inputs) for a in call.args]


def serve(fd: int, parent_pid: int) -> None:
    """The child's main loop."""
    from ..runtime.module import Module
    conn = child_connection(fd, parent_pid)  # exits when the fuzzer is gone
    conn.send(("ready", None))
    while True:
        try:
            req = conn.recv()
        except (EOFError, OSError):
            return
        if req is None:
            return
        lib_path, threads, calls = req
        for i, call in enumerate(calls):
            try:
                mod = Module(lib_path, call.symbol, list(call.args), "",
                             release_gil=True)
                mod.set_num_threads(threads, source="Sandbox num_threads")
                outcome = call_guarded(mod, call)
            except Exception as e:  # a library that will not load, a missing symbol, ...
                outcome = ("error", f"{type(e).__name__}: {e}")
            conn.send(("result", i, outcome))
