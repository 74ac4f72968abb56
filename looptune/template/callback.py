"""Tuning callbacks, called as `callback(tuner, inputs, results)` after every batch:
`progress_bar` (one live line) and `log_to_file` (every record into a looptune database,
which apply_history_best, compile_tir and the model compiler read)."""
from __future__ import annotations

import math

from ..tune.progress import Progress
from .dispatch import log_database
from .measure import to_record


class ProgressBar:
    """One live line: trials, best time and GFLOP/s, failures, ETA (tune/progress.py)."""

    def __init__(self, total: int, prefix: str = "", *, stream=None):
        self.total = total
        self.prefix = prefix
        self.stream = stream
        self.progress = None
        self.done = self.failures = 0

    def __call__(self, tuner, inputs, results) -> None:
        if self.progress is None:
            self.progress = Progress(self.total, None, stream=self.stream)
        self.done += len(results)
        self.failures += sum(not r.ok for r in results)
        best = tuner.best_secs if math.isfinite(tuner.best_secs) else None
        self.progress.update(task=self.prefix or tuner.task.name, done=self.done, best_secs=best,
                             flops=tuner.task.flop, failures=self.failures,
                             force=self.done >= self.total)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()
            self.progress = None


def progress_bar(total: int, prefix: str = "", si_prefix: str = "G", *, stream=None) -> ProgressBar:
    """A live progress line for `total` trials (`si_prefix` is accepted for AutoTVM's sake;
    throughput is shown in GFLOP/s)."""
    return ProgressBar(total, prefix, stream=stream)


class LogToFile:
    """Commits each measured config's record to a database (see dispatch.log_database)."""

    def __init__(self, log):
        self.log = log
        self.database = log_database(log)

    def __call__(self, tuner, inputs, results) -> None:
        for inp, res in zip(inputs, results):
            self.database.commit_tuning_record(to_record(inp, res))


def log_to_file(log) -> LogToFile:
    """Keep every record in `log`: a directory (a JSON database: two JSON-lines files), an
    SQLite file (`*.sqlite`), a work dir, or a Database."""
    return LogToFile(log)
