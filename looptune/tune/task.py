"""The task style of tuning: register a function that builds tensor expressions, make a Task
of it with arguments, tune it, and apply or print its best schedule.

    @register_workload
    def matmul(n, m, k):
        A = te.placeholder((n, k), name="A"); ...
        return [A, B, C]

    task = Task("matmul", (512, 512, 512), target="cpu")
    task.tune(work_dir="work", max_trials=64)
    mod = task.apply_best("work")
"""
from __future__ import annotations

from typing import Callable

from .. import te
from ..registry import Registry
from ..target import Target
from ..text import printable
from .database.base import Database
from .tune import _database, compile_tir, tune_tir

WORKLOADS = Registry("workload", error=KeyError,
                     hint=" (decorate a function with @register_workload)")


def register_workload(fn: Callable | None = None, *, name: str | None = None):
    """Decorator: make `fn(*args) -> [inputs..., outputs...]` (te tensors) a named workload."""
    def deco(f):
        return WORKLOADS.add(name or f.__name__, f)
    return deco(fn) if fn is not None else deco


def get_workload(name: str) -> Callable:
    return WORKLOADS.lookup(name)


class Task:
    """A workload function with concrete arguments, for one target."""

    def __init__(self, func, args=(), target="cpu", *, kwargs=None):
        fn = get_workload(func) if isinstance(func, str) else func
        if not callable(fn):
            raise TypeError(f"Task needs a registered workload name or a function, got {func!r}")
        self.fn = fn
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.target = Target.create(target)
        tensors = fn(*self.args, **self.kwargs)
        if not isinstance(tensors, (list, tuple)) or not tensors:
            raise TypeError(f"workload {fn.__name__} must return [inputs..., outputs...] as te "
                            f"tensors, got {tensors!r}")
        self.tensors = list(tensors)  # the function's parameters, in order
        self.func = te.create_prim_func(self.tensors, name=fn.__name__)
        shown = ", ".join([repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()])
        self.name = f"{fn.__name__}({shown})"
        self.database = None  # where tune() kept the results; the default for the methods below

    def __repr__(self):
        return f"Task({self.name}, target={self.target})"

    def tune(self, work_dir=None, *, max_trials: int = 64, **kwargs) -> Database:
        """Tune this task for up to `max_trials` trials into `work_dir` (an SQLite database
        unless it holds another; a work dir with records resumes) and return the database, which
        best_record, apply_best and print_best then use by default. Other options (seed,
        max_time_s, strategy, ...) go to tune_tir."""
        self.database = tune_tir(self.func, self.target, work_dir, max_trials_global=max_trials,
                                 task_name=self.name, **kwargs)
        return self.database

    def _db(self, work_dir, database) -> Database:
        if work_dir is None and database is None:
            if self.database is None:
                raise ValueError(f"{self.name} has not been tuned in this session; pass the "
                                 "work_dir (or database) that holds its records")
            return self.database
        return _database(database, work_dir, create=False)

    def best_record(self, work_dir=None, *, database=None):
        db = self._db(work_dir, database)
        recs = db.query_tuning_record(self.func, self.target, k=1)
        return recs[0] if recs else None

    def apply_best(self, work_dir=None, *, database=None, num_threads: int | None = None):
        """The compiled module of the best (verified) record."""
        return compile_tir(self._db(work_dir, database), self.func, self.target,
                           num_threads=num_threads)

    def print_best(self, work_dir=None, *, database=None, file=None) -> None:
        """Print the best record's latency and its trace as Python schedule code."""
        import sys
        out = file or sys.stdout
        name = printable(self.name)
        rec = self.best_record(work_dir, database=database)
        if rec is None:
            print(f"{name}: no successful record yet", file=out)
            return
        print(f"# {name}: best {rec.median_secs * 1e3:.4f} ms on {printable(rec.target)}", file=out)
        print(printable(rec.trace.simplified().as_python(), keep="\n"), file=out)
