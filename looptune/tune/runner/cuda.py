"""CudaRunner: measure CUDA candidates as LocalRunner measures CPU ones - one at a time in a
persistent worker process (killed and replaced when a kernel hangs or crashes it), seeded
random inputs, a check against the reference, the same failure classes (run_error,
run_timeout, wrong_result; build errors come from the builder) - but on the GPU.

An artifact is a CUDA program described by runtime.cuda.compile_program (a `.json` beside
its cubin). The reference may be a CPU library (`.so`, the unscheduled function built for
the host, as LocalBuilder builds it) or another CUDA artifact. Inputs are copied to the
device once; the times are of the kernels on device-resident arrays, taken with CUDA events
(runtime.cuda.CudaModule.time_evaluator): warm-up, `number` runs per repeat raised to
`min_repeat_ms`, `repeat` repeats, the record's time their median. `arg_offsets` do not apply
(device memory is allocated aligned); `enable_cpu_cache_flush` flushes the GPU's L2 instead.
After a run error the worker is replaced: a failed kernel can leave the CUDA context unusable.
"""
from __future__ import annotations

import os
import resource
import sys
import time
import weakref
from pathlib import Path

import numpy as np

from ...runtime.child import child_connection, start_child, stop_child
from ...error import RunError
from ...runtime.ndarray import compare, pack_args
from .base import Runner, RunnerInput, RunnerResult
from .local import LocalRunner, _WorkerLost, _WorkerProcess
from .worker import COLD_SLACK_S, Worker


def _boot(device: int) -> str:
    return ("import sys; from looptune.tune.runner.cuda import main; "
            f"main(int(sys.argv[1]), int(sys.argv[2]), device={int(device)})")


class _CudaWorkerProcess(_WorkerProcess):
    def __init__(self, device: int):  # not super().__init__: that starts a CPU worker
        try:
            self.proc, self.conn = start_child(_boot(device))
        except OSError as e:
            raise _WorkerLost("run_error", f"cannot start {sys.executable}: {e}") from None
        self.served = 0
        self._finalizer = weakref.finalize(self, stop_child, self.proc, self.conn)


@Runner.registry.register("cuda")
class CudaRunner(LocalRunner):
    """Measures CUDA programs on GPU `device`, one at a time, in an isolated worker process
    (not thread-safe). Timeouts and the check's tolerances are LocalRunner's."""

    def __init__(self, *, timeout_s: float = 10.0, check_rtol: float = 1e-3,
                 check_atol: float = 1e-3, device: int = 0, reference_timeout_s: float = 300.0):
        super().__init__(timeout_s=timeout_s, check_rtol=check_rtol, check_atol=check_atol,
                         reference_timeout_s=reference_timeout_s)
        self.device = device

    def _run_one(self, inp: RunnerInput) -> RunnerResult:
        res = super()._run_one(inp)
        if res.error_class == "run_error":
            self._discard()
        return res

    worker_name = "CUDA measurement worker"

    def _start_worker(self) -> _WorkerProcess:
        return _CudaWorkerProcess(self.device)


def _comparable(a: np.ndarray) -> np.ndarray:
    """bfloat16 (ml_dtypes, numpy kind 'V') as float32, for `compare`."""
    return a.astype(np.float32) if a.dtype.kind == "V" else a


class CudaWorker(Worker):
    """The worker's side: loads CUDA artifacts and measures them on the device."""

    def __init__(self, conn, device: int = 0, init_error: str | None = None):
        super().__init__(conn)
        self.device = device
        self.init_error = init_error

    def reference_outputs(self, inp) -> list:
        artifact, _ = inp.reference
        if not str(artifact).endswith(".json"):
            return super().reference_outputs(inp)  # a CPU library
        from ...runtime.cuda import CudaModule
        return self.cached_reference(
            inp, lambda arrays: CudaModule.load(artifact, device=self.device)(*arrays),
            Path(artifact).stem)

    def measure(self, inp, rtol: float, atol: float) -> dict:
        if self.init_error:
            raise RunError(self.init_error)
        from ...runtime.cuda import CudaModule, DeviceArray, synchronize
        mod = CudaModule.load(inp.artifact, device=self.device)
        host = pack_args(self.fresh_args(inp), inp.packed)
        ref = self.reference_outputs(inp) if inp.reference is not None else None
        dev = [DeviceArray.from_numpy(a, device=self.device) for a in host]
        t0 = time.perf_counter()
        mod(*dev)  # the first call: checked, and it sets the parent's timing deadline
        synchronize(self.device)
        first = time.perf_counter() - t0
        self.conn.send(("first", first))
        if ref is not None:
            outs = [(a.name, d.numpy()) for d, a in zip(dev, inp.args_info) if a.written]
            for (name, out), expect in zip(outs, ref):
                problem = compare(name, _comparable(out), _comparable(expect), rtol, atol)
                if problem:
                    return {"error_class": "wrong_result", "error_msg": problem}
        limit = inp.abort_above_secs
        if limit is not None and first > limit:  # as the CPU worker: compare a warm call
            warm = first if first > 2 * limit + COLD_SLACK_S else mod.time_evaluator(
                number=1, repeat=1, warm_up=False)(*dev).results[0]
            if warm > limit:
                return {"run_secs": (warm,), "aborted_early": True}
        c = inp.config
        prof = mod.time_evaluator(number=c.number, repeat=c.repeat, min_repeat_ms=c.min_repeat_ms,
                                  enable_cache_flush=c.enable_cpu_cache_flush,
                                  warm_up=False)(*dev)
        return {"run_secs": tuple(prof.results)}


def main(fd: int, parent_pid: int, device: int = 0) -> None:
    """Entry point of the worker process: serve requests on the socket `fd`."""
    conn = child_connection(fd, parent_pid)  # Ctrl-C is the tuner's; exits if the tuner dies
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    init_error = None
    try:  # the context once, before the first deadline starts
        from ...runtime.cuda import use_device
        use_device(device)
    except Exception as e:  # noqa: BLE001 - every request is then answered with why
        init_error = f"no CUDA device to measure on (pid {os.getpid()}): {e}"
    conn.send(("ready", None))
    CudaWorker(conn, device, init_error).serve()
