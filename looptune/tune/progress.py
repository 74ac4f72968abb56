"""One live progress line for a tuning run: trials, tasks touched, best latency and GFLOP/s,
failures, ETA.
On a terminal the line is redrawn in place; otherwise a line is printed every few seconds."""
from __future__ import annotations

import sys
import time

from ..text import printable


class Progress:
    """The live progress line of a tuning run; `note` prints a line above it. enabled=False
    keeps it silent."""

    def __init__(self, total: int | None, max_time_s: float | None, *, stream=None,
                 enabled: bool = True, interval_s: float = 5.0):
        self.total = total
        self.max_time_s = max_time_s
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = interval_s
        self.start = time.time()
        self.last_print = 0.0
        self.width = 0
        self._first = None  # (elapsed, trials) when the first trial was counted

    def elapsed(self) -> float:
        return time.time() - self.start

    def eta(self, done: int) -> float | None:
        """Seconds left: at the pace since the first trial was done (what came before it -
        design spaces, default schedules, the first compile - is no guide), or by the time
        limit; None while there is no pace yet."""
        el = self.elapsed()
        if self._first is None and done:
            self._first = (el, done)
        candidates = []
        if self.total and self._first is not None and done > self._first[1]:
            t0, d0 = self._first
            candidates.append((el - t0) / (done - d0) * max(0, self.total - done))
        if self.max_time_s:
            candidates.append(max(0.0, self.max_time_s - el))
        return min(candidates) if candidates else None

    def update(self, *, task: str, done: int, best_secs: float | None, flops: float | None,
               failures: int, tasks: tuple | None = None, force: bool = False):
        """`tasks`: (tasks with a trial, all tasks), shown as "tasks 23/40" when several."""
        if not self.enabled:
            return
        now = time.time()
        if not self.tty and not force and now - self.last_print < self.interval_s:
            return
        self.last_print = now
        total = f"/{self.total}" if self.total else ""
        if best_secs is None:
            best = "best -"
        else:
            gf = f" ({flops / best_secs / 1e9:.1f} GFLOP/s)" if flops else ""
            best = f"best {best_secs * 1e3:.4g} ms{gf}"
        eta = self.eta(done)
        eta_s = "-" if eta is None else f"{eta:.0f}s"
        touched = f" | tasks {tasks[0]}/{tasks[1]}" if tasks and tasks[1] > 1 else ""
        line = (f"[{printable(task)}] trials {done}{total}{touched} | {best} | failed {failures} | "
                f"{self.elapsed():.0f}s elapsed, ETA {eta_s}")
        if self.tty:
            pad = max(0, self.width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self.width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def note(self, text: str):
        """A line of its own (after close)."""
        if self.enabled:
            self.stream.write(printable(text, keep="\n") + "\n")
            self.stream.flush()

    def close(self):
        if self.enabled and self.tty and self.width:
            self.stream.write("\n")
            self.stream.flush()
