"""LocalRunner: measure candidates one at a time in a persistent worker process (see
worker.py), replaced whenever a kernel crashes it or runs past its deadline."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import weakref

from ...runtime.child import kill_child, start_child, stop_child
from .base import EvaluatorConfig, Runner, RunnerInput, RunnerResult

START_TIMEOUT_S = 120.0  # importing numpy + looptune and compiling the timer library once
RECYCLE_AFTER = 1000     # candidates per worker: bounds the libraries one process keeps loaded

# A fresh interpreter that imports only looptune. (multiprocessing's "spawn" would also re-run
# the user's __main__ in it: a tuning script without a __main__ guard would break, and one
# that imports torch would pay for that again on every restart.)
_BOOT = ("import sys; from looptune.tune.runner.worker import main; "
         "main(int(sys.argv[1]), int(sys.argv[2]))")


class _WorkerLost(Exception):
    def __init__(self, error_class: str, message: str):
        super().__init__(message)
        self.error_class = error_class


def _death_message(returncode) -> str:
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        hint = " (out of memory?)" if name == "SIGKILL" else ""
        return f"the kernel crashed (signal {name}){hint}"
    return f"the measurement worker exited unexpectedly (exit code {returncode})"


class _WorkerProcess:
    """One worker process and our end of its socket; stopped (and reaped) on stop(), when
    garbage-collected, or at interpreter exit. The worker exits by itself if we die."""

    def __init__(self):
        try:
            self.proc, self.conn = start_child(_BOOT)
        except OSError as e:
            raise _WorkerLost("run_error", f"cannot start {sys.executable}: {e}") from None
        self.served = 0
        self._finalizer = weakref.finalize(self, stop_child, self.proc, self.conn)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def recv(self, timeout: float, timeout_message: str):
        if not self.conn.poll(timeout):
            raise _WorkerLost("run_timeout", timeout_message)
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            raise _WorkerLost("run_error", _death_message(self._wait())) from None

    def send(self, msg) -> None:
        try:
            self.conn.send(msg)
        except OSError:
            raise _WorkerLost("run_error", _death_message(self._wait())) from None

    def _wait(self):
        try:
            return self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            return None

    def pin(self, cpus) -> None:
        """Run the worker (its main thread, which measures) on `cpus`."""
        try:
            os.sched_setaffinity(self.proc.pid, cpus)
        except OSError:  # it has died: the next candidate finds out
            pass

    def stop(self, *, kill: bool = False) -> None:
        if kill and self.alive():
            kill_child(self.proc)
        self._finalizer()


@Runner.registry.register("local")
class LocalRunner(Runner):
    """Measures in one isolated worker process, one candidate at a time (not thread-safe).

    A candidate gets `timeout_s` seconds for loading, the reference check and its first call;
    timing then gets `timeout_s` plus three times what the config's repeats should take at the
    speed of that first call. Running the reference (the unscheduled program: once per
    worker, and slow at GPU sizes) has `reference_timeout_s` of its own. Results are checked
    with rtol `check_rtol` and atol `check_atol * max(1, max|reference|)`."""

    def __init__(self, *, timeout_s: float = 10.0, check_rtol: float = 1e-3,
                 check_atol: float = 1e-3, reference_timeout_s: float = 300.0):
        self.timeout_s = timeout_s
        self.reference_timeout_s = reference_timeout_s
        self.check_rtol = check_rtol
        self.check_atol = check_atol
        self._worker: _WorkerProcess | None = None
        self._cpus = None  # where the worker measures (pin); None: anywhere

    def run(self, inputs: list) -> list:
        return [self._run_one(inp) for inp in inputs]

    def pin(self, cpus) -> None:
        """Measure on `cpus` (a set of CPU numbers; None: on every CPU this process may use),
        this worker and those started later (the task scheduler's CpuShare)."""
        self._cpus = None if cpus is None else frozenset(cpus)
        if self._worker is not None:
            self._worker.pin(self._cpus or os.sched_getaffinity(0))

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    def __enter__(self) -> "LocalRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def timing_budget(self, config: EvaluatorConfig, first_call_secs: float) -> float:
        """Seconds allowed for timing after the first call: warm-up, calibration and repeats,
        each lasting the longer of `number` calls and `min_repeat_ms`, three times over."""
        per_repeat = max(config.number * first_call_secs, config.min_repeat_ms / 1e3)
        return self.timeout_s + 3 * (config.repeat + 2) * per_repeat

    def _run_one(self, inp: RunnerInput) -> RunnerResult:
        try:
            w = self._live_worker()
            w.send((inp, self.check_rtol, self.check_atol))
            hangs = (f"no result within {self.timeout_s:g} s: the kernel hangs or is far too "
                     "slow (worker killed)")
            kind, payload = w.recv(self.timeout_s, hangs)
            if kind == "reference":
                kind, payload = w.recv(
                    self.reference_timeout_s, f"the reference (the unscheduled program) did not "
                    f"finish within {self.reference_timeout_s:g} s (worker killed); raise the "
                    "runner's reference_timeout_s")
                if kind == "reference_done":  # else the reference failed: that is the result
                    kind, payload = w.recv(self.timeout_s, hangs)
            if kind == "first":
                budget = self.timing_budget(inp.config, payload)
                kind, payload = w.recv(budget, f"timing did not finish within {budget:.3g} s "
                                       f"(the first call took {payload:.3g} s; worker killed)")
        except _WorkerLost as e:
            self._discard()
            return RunnerResult(error_class=e.error_class, error_msg=str(e))
        except BaseException:  # Ctrl-C mid-measurement: the worker's state is unknown
            self._discard()
            raise
        w.served += 1
        return RunnerResult(**payload)

    def _live_worker(self) -> _WorkerProcess:
        w = self._worker
        if w is not None and w.alive() and w.served < RECYCLE_AFTER:
            return w
        self.close()
        try:
            w = self._worker = self._start_worker()
            w.recv(START_TIMEOUT_S, f"the {self.worker_name} did not start within "
                   f"{START_TIMEOUT_S:g} s")
            if self._cpus is not None:
                w.pin(self._cpus)
        except _WorkerLost as e:
            self._discard()
            raise _WorkerLost("run_error", f"the {self.worker_name} failed to start: {e}") from None
        return w

    worker_name = "measurement worker"

    def _start_worker(self) -> _WorkerProcess:
        return _WorkerProcess()

    def _discard(self) -> None:
        if self._worker is not None:
            self._worker.stop(kill=True)
            self._worker = None
