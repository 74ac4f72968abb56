"""apply_history_best: run templates with the best configs a tuning log holds.

A log is any looptune database (what `callback.log_to_file` writes, or a tune_tir work dir):
a template's records are ordinary records of its workload whose traces hold its knobs as
`sample_knob` instructions, so the config is read back from those decisions - from the
records of any workload that computes the template's in the same loops, whatever its block
names (Database.records_like).
"""
from __future__ import annotations

from pathlib import Path

from ..schedule import ScheduleError
from ..target import Target
from ..tir.structural import structural_hash
from ..tune.database.base import Database, rank
from ..tune.database.json import JSONDatabase
from ..tune.database.sqlite import DEFAULT_FILE, SQLiteDatabase
from ..tune.replay import replay
from .space import config_of_trace
from .task import _DISPATCH


def open_log(log) -> Database:
    """The database of an existing log: a Database, an SQLite file, or a work dir."""
    if isinstance(log, Database):
        return log
    from ..tune.database.work_dir import open_work_dir
    return open_work_dir(log)


def log_database(log) -> Database:
    """The database to append a log to: a Database, an SQLite file (`*.sqlite`, `*.db`, or
    an existing file), a work dir holding an SQLite database, or else a JSON database in the
    directory `log` (created if need be)."""
    if isinstance(log, Database):
        return log
    p = Path(log)
    if p.suffix in (".sqlite", ".db") or p.is_file():
        return SQLiteDatabase(path=str(p))
    if (p / DEFAULT_FILE).exists():
        return SQLiteDatabase(work_dir=str(p))
    return JSONDatabase(p)


def reproduces(record, task, sch) -> bool:
    """Does the template's schedule `sch` (run with the record's config) compute as the
    record's schedule does, i.e. is what was measured what the template gives now? The
    record's trace is replayed on the task's workload (tune.replay) unless it was made on
    that very workload, where its stored hash says."""
    if record.workload.key == task.workload.key:
        return not record.sch_hash or structural_hash(sch.func) == record.sch_hash
    try:
        measured = replay(record, task.func)
    except ScheduleError:
        return False
    return structural_hash(measured.func) == structural_hash(sch.func)


class ApplyHistoryBest:
    """Inside `with apply_history_best(log):`, a template called directly runs with the
    best config of its workload in `log` (on `target`, ranked among records measured with
    the same settings: `evaluator`'s, by default the newest template record's)."""

    def __init__(self, log, *, target="cpu", evaluator=None):
        self.log = log
        self.database = open_log(log)
        self.target = Target.create(target)
        self.evaluator = evaluator
        self._token = None

    def best(self, task) -> tuple:
        """(config, record) of the task's fastest record, or (None, None)."""
        db = self.database
        if not db.has_workload(task.func):
            return None, None
        configs, mine = {}, []
        for rec in db.records_like(task.func, task.target):
            cfg = config_of_trace(task.config_space, rec.trace) if rec.ok else None
            if cfg is not None:
                configs[id(rec)] = cfg
                mine.append(rec)
        ranked = rank(mine, 1, self.evaluator)
        return (configs[id(ranked[0])], ranked[0]) if ranked else (None, None)

    query = best

    def describe(self) -> str:
        return f"the log {self.log}" if not isinstance(self.log, Database) else repr(self.log)

    def __enter__(self) -> "ApplyHistoryBest":
        self._token = _DISPATCH.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _DISPATCH.reset(self._token)
        self._token = None


def apply_history_best(log, *, target="cpu", evaluator=None) -> ApplyHistoryBest:
    """A context in which templates run with their best logged configs (see ApplyHistoryBest)."""
    return ApplyHistoryBest(log, target=target, evaluator=evaluator)
