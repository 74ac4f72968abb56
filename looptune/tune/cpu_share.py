"""Building the next candidates while this one is measured, on CPUs of their own.

A batch used to be built completely (on every core) and then measured (on one): on two cores
the compiler waited for the measurements and the measuring core idled through the builds.
When measurements run on fewer threads than this process has CPUs, the task scheduler now
measures each candidate as soon as it is built, and the CPUs are split:

- the *measuring* CPUs (as many as the evaluator's threads) run the measurement worker,
  pinned there; while the tuner waits for its next candidate to be built they are lent to
  compiles, but a measurement waits until every lent compile has finished, and no compile
  starts on them while it runs;
- the *other* CPUs run everything else: the compilers that are not lent, and the tuner's own
  thread (rendering, database commits), pinned there while the batch is measured.

So no process ever shares a measuring CPU with a measurement. What a compile on another core
still costs a measurement (a shared L3 cache, memory bandwidth) was measured on a 2-vCPU
Zen 4 (benchmarks/measure_interference.py): medians -0.4% to +2.7% against the same kernels
timed on an idle machine, the most for a 1024 matmul whose 12 MB share the L3 with the
compiler; the record errs on the slow side of what a user's call sees.

Linux only (per-thread affinity: `os.sched_setaffinity(0, ...)` pins the calling thread, and
a compiler it starts inherits that). Elsewhere, or on one CPU, batches build then measure.
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager


class CpuShare:
    """The CPUs a batch's measurements run on (`measuring`) and the rest (`others`). The
    measuring ones are lent to compiles (`lend`/`give_back`) only while the tuner has nothing
    to measure: before its first candidate is built and while it waits for the next
    (`idle`). A measurement (`measuring_now`) waits for the lent compiles to finish."""

    def __init__(self, measuring: frozenset, others: frozenset):
        self.measuring = measuring
        self.others = others
        self._cv = threading.Condition()
        self._lent = 0            # compiles running on the measuring CPUs
        self._lendable = True     # nothing to measure yet
        self._closed = False

    def lend(self) -> bool:
        """Wait until the measuring CPUs may take a compile and count it; False once the
        share is closed (the batch is over: no more compiles)."""
        with self._cv:
            while not self._lendable and not self._closed:
                self._cv.wait()
            if self._closed:
                return False
            self._lent += 1
            return True

    def give_back(self) -> None:
        """A lent compile has finished."""
        with self._cv:
            self._lent -= 1
            self._cv.notify_all()

    @contextmanager
    def idle(self):
        """Wait for the next build inside this: the measuring CPUs are lent meanwhile."""
        with self._cv:
            self._lendable = True
            self._cv.notify_all()
        try:
            yield
        finally:
            with self._cv:
                self._lendable = False

    @contextmanager
    def measuring_now(self):
        """Measure inside this: it waits for the lent compiles to finish, and none starts
        until the next `idle`."""
        with self._cv:
            self._lendable = False
            while self._lent:
                self._cv.wait()
        yield

    def close(self) -> None:
        """Lend no more: the threads waiting in `lend` get False."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()


def plan(builder, runner, threads: int | None, target) -> CpuShare | None:
    """A CpuShare for measuring on `threads` CPUs while `builder` compiles on the others, or
    None where the batch should be built first and measured after: a builder or runner that
    cannot be split this way (only LocalBuilder compiles here, only LocalRunner can be
    pinned), a target other than this CPU, measurements on every CPU (threads None: the
    target's cores), fewer than two CPUs, or no per-thread affinity (not Linux)."""
    if not (hasattr(os, "sched_setaffinity") and getattr(builder, "streams", False)
            and callable(getattr(runner, "pin", None)) and target.kind == "cpu"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if threads is None or threads >= len(cpus):
        return None
    measuring = frozenset(cpus[-threads:])  # the last: CPU 0 takes more of the interrupts
    return CpuShare(measuring, frozenset(cpus) - measuring)


@contextmanager
def pinned(cpus):
    """Run the calling thread on `cpus` inside this, then as it was."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
