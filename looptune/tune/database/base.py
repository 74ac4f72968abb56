"""Workloads, tuning records, and the Database interface.

A Workload is an unscheduled PrimFunc with its structural hash (the key of everything); a
TuningRecord is one measured schedule of it: the trace, run times (None on failure, with an
error class and message), target, argument info and measurement settings. Both are plain
JSON. Databases are append-only; what a killed process wrote completely stays readable.
"""
from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from dataclasses import dataclass, field

from ...runtime.module import ArgInfo
from ...schedule import Schedule, ScheduleError, Trace
from ...target import Target
from ...target.machine import machine_id
from ...tir.func import PrimFunc
from ...tir.structural import structural_hash
from ..error import DatabaseWarning, TuneError
from ..registry import Registry

RECORD_FORMAT_VERSION = 1
ERROR_CLASSES = ("build_error", "build_timeout", "run_error", "run_timeout", "wrong_result",
                 "schedule_error")
MODULE_EQUALITIES = ("structural", "anchor-block")


@dataclass(frozen=True, eq=False)
class Workload:
    """An unscheduled function and its key (structural hash, or anchor-block hash)."""

    func: PrimFunc
    key: str

    @property
    def name(self) -> str:
        return self.func.name

    def to_json(self) -> dict:
        from ...tir.serialize import func_to_json
        return {"key": self.key, "name": self.func.name, "func": func_to_json(self.func)}

    @staticmethod
    def from_json(obj: dict) -> "Workload":
        from ...tir.serialize import func_from_json
        return Workload(func_from_json(obj["func"]), obj["key"])


@dataclass(frozen=True, eq=False)
class TuningRecord:
    """One measured (or failed) schedule of a workload: what the database stores, ranks and
    replays. A failure has run_secs None and an error class from ERROR_CLASSES."""

    workload: Workload
    trace: Trace
    run_secs: tuple | None            # seconds per call, one per repeat; None if it failed
    target: Target
    args_info: tuple = ()             # ArgInfo of each argument
    measure: dict = field(default_factory=dict)  # evaluator settings, threads, compiler, ...
    error_class: str | None = None    # one of ERROR_CLASSES when run_secs is None
    error_msg: str | None = None
    time: float = field(default_factory=time.time)
    sch_hash: str | None = None       # structural hash of the scheduled function

    @property
    def ok(self) -> bool:
        return self.run_secs is not None and self.error_class is None

    @property
    def baseline(self) -> bool:
        """A baseline record times its workload's default schedule (looptune.dlight), not a
        search candidate: `measure["baseline"]` says so. It is a schedule like any other - its
        trace replays, it ranks with the records measured with the same settings, and
        query_tuning_record returns it when nothing tuned is faster (compile_tir then builds
        the default schedule) - but it is no trial: budgets and trial counts leave it out."""
        return bool(self.measure.get("baseline"))

    @property
    def median_secs(self) -> float:
        """The median of the repeated measurements; infinity for a failed record."""
        if not self.ok or not self.run_secs:
            return math.inf
        return statistics.median(self.run_secs)

    def as_schedule(self, func: PrimFunc | None = None) -> Schedule:
        """The record's trace replayed on `func` (default: its workload's function), as
        MetaSchedule's `record.as_schedule()`; ScheduleError if it no longer replays. Not
        checked against the unscheduled program: compile_tir does that."""
        from ..replay import replay
        return replay(self, self.workload.func if func is None else func)

    def to_json(self) -> dict:
        return {
            "version": RECORD_FORMAT_VERSION,
            "workload": self.workload.key,
            "trace": self.trace.to_json(),
            "run_secs": None if self.run_secs is None else list(self.run_secs),
            "target": self.target.to_json(),
            "args_info": [a.to_json() for a in self.args_info],
            "measure": dict(self.measure),
            "error_class": self.error_class,
            "error_msg": self.error_msg,
            "time": self.time,
            "sch_hash": self.sch_hash,
        }

    @staticmethod
    def from_json(obj: dict, workload: Workload) -> "TuningRecord":
        if obj.get("version") != RECORD_FORMAT_VERSION:
            raise ValueError(f"tuning record format {obj.get('version')!r} is not "
                             f"{RECORD_FORMAT_VERSION}, the one this looptune reads (a record "
                             "of another looptune version: read it with that version)")
        error_class, error_msg = obj.get("error_class"), obj.get("error_msg")
        _check(error_class is None or error_class in ERROR_CLASSES, "error_class", error_class,
               f"None or one of {ERROR_CLASSES}")
        _check(error_msg is None or isinstance(error_msg, str), "error_msg", error_msg,
               "None or a string")
        _check(obj.get("sch_hash") is None or isinstance(obj["sch_hash"], str), "sch_hash",
               obj.get("sch_hash"), "None or a string")
        stamp = obj.get("time", 0.0)
        _check(_real(stamp) and 0 <= stamp < math.inf, "time", stamp,
               "a finite number of seconds since the epoch")
        _check(isinstance(obj["args_info"], list), "args_info", obj["args_info"], "a list")
        return TuningRecord(
            workload=workload,
            trace=Trace.from_json(obj["trace"]),
            run_secs=_run_secs(obj["run_secs"]),
            target=Target.from_json(obj["target"]),
            args_info=tuple(_arg_info(a) for a in obj["args_info"]),
            measure=_measure(obj.get("measure")),
            error_class=error_class,
            error_msg=error_msg,
            time=float(stamp),
            sch_hash=obj.get("sch_hash"),
        )


def _check(ok: bool, name: str, value, want: str) -> None:
    """ValueError naming a stored field that no looptune writes: the record is skipped."""
    if not ok:
        shown = repr(value)
        raise ValueError(f"{name} must be {want}, got {shown[:80]}{'...' if len(shown) > 80 else ''}")


def _real(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _whole(x, lo: int, hi: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and lo <= x <= hi


MAX_THREADS = 4096  # more threads than any machine runs a kernel with: a damaged or forged value

# Checks of the `measure` fields that change what is built or how a time is read (the
# others are provenance, shown but never acted on): (test, what it must be).
_MEASURE_FIELDS = {
    "num_threads": (lambda v: v is None or _whole(v, 1, MAX_THREADS),
                    f"None or a whole number of threads from 1 to {MAX_THREADS}"),
    "number": (lambda v: _whole(v, 1, 2**31), "a whole number >= 1"),
    "repeat": (lambda v: _whole(v, 1, 2**31), "a whole number >= 1"),
    "min_repeat_ms": (lambda v: _real(v) and 0 <= v < math.inf, "a finite number >= 0"),
    "enable_cpu_cache_flush": (lambda v: isinstance(v, bool), "true or false"),
    "arg_offsets": (lambda v: v is None or (isinstance(v, list) and v and
                                            all(_whole(x, 0, 4095) for x in v)),
                    "None or a list of byte offsets"),
    "calls_from": (lambda v: v in ("python", "c"), "'python' or 'c'"),
    "aborted_early": (lambda v: isinstance(v, bool), "true or false"),
    "run": (lambda v: v is None or isinstance(v, dict), "None or an object"),
    "machine": (lambda v: isinstance(v, dict) and isinstance(v.get("id"), str),
                "an object with a fingerprint id"),
}


def _measure(value) -> dict:
    """A stored `measure` dict whose settings are plausible (a record claiming a billion
    threads would build a kernel with them)."""
    if value is None:
        return {}
    _check(isinstance(value, dict), "measure", value, "an object")
    for key, (ok, want) in _MEASURE_FIELDS.items():
        if key in value:
            _check(ok(value[key]), f"measure.{key}", value[key], want)
    return dict(value)


def _arg_info(obj) -> ArgInfo:
    _check(isinstance(obj, dict) and isinstance(obj.get("shape"), list)
           and all(_whole(n, 0, 2**62) for n in obj["shape"]) and isinstance(obj.get("dtype"), str)
           and isinstance(obj.get("name"), str), "args_info[i]", obj,
           "an object with a name, a shape of whole numbers and a dtype")
    return ArgInfo.from_json(obj)


def _run_secs(values) -> tuple | None:
    """Stored run times, which must be positive and finite: a record claiming 0 s, a
    negative or a NaN time would otherwise rank first."""
    if values is None:
        return None
    _check(isinstance(values, list) and values and all(_real(x) for x in values), "run_secs",
           values, "a non-empty list of seconds")
    secs = tuple(float(x) for x in values)
    if not all(0 < x < math.inf for x in secs):
        raise ValueError(f"run_secs must be positive and finite, got {list(secs)}")
    return secs


# The measurement settings that change what a time means, with the value a record written
# before the setting existed was measured with. Two records are ranked against each other only
# when they agree on all of them (a 2-thread time says nothing about a 1-thread one).
COMPARABLE_SETTINGS = {"num_threads": None, "enable_cpu_cache_flush": False,
                       "arg_offsets": None, "calls_from": "c"}


def measure_settings(measure) -> tuple:
    """The comparable settings of a record's `measure` dict, an EvaluatorConfig, or a dict
    of settings: records with equal tuples have comparable times. The last is the measuring
    machine's fingerprint id (target/machine.py; this machine's for settings or records that
    name none): records timed on different kinds of machine are never ranked together."""
    if not isinstance(measure, dict):
        measure = measure.to_json()

    def value(k, legacy):
        v = measure.get(k, legacy)
        return tuple(v) if isinstance(v, list) else v
    return tuple((k, value(k, legacy)) for k, legacy in COMPARABLE_SETTINGS.items()) \
        + (("machine", machine_id(measure)),)


def record_key(record: TuningRecord) -> str:
    """The identity of a trial, the unique key of a shared database: the same schedule (the
    sha256 of its trace) of the same workload for the same target, timed on the same kind of
    machine with the same comparable settings, as a baseline or not. Sending a record again (a
    restarted tuner, `looptune db push`) matches it, so nothing is stored twice; a measurement
    of another schedule, on another kind of machine or with other settings is another trial.
    The times are no part of it: a schedule timed twice alike is one trial, kept as first
    stored (a tuner never measures a schedule its database already holds)."""
    trace = json.dumps(record.trace.to_json(), sort_keys=True, separators=(",", ":"))
    blob = json.dumps([record.workload.key, hashlib.sha256(trace.encode()).hexdigest(),
                       record.target.key(), measure_settings(record.measure), record.baseline],
                      sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def rank(records, k: int, evaluator=None) -> list:
    """The k fastest successful records among those measured with `evaluator`'s settings
    (an EvaluatorConfig or a measure dict; None: the settings of the newest successful
    record)."""
    ok = [r for r in records if r.ok]
    if not ok:
        return []
    if evaluator is None:
        evaluator = max(enumerate(ok), key=lambda ir: (ir[1].time, ir[0]))[1].measure
    want = measure_settings(evaluator)
    same = [r for r in ok if measure_settings(r.measure) == want]
    same.sort(key=lambda r: r.median_secs)
    return same[:k]


def shape_key(func: PrimFunc) -> str:
    """The structural hash of func blind to its block names too: workloads with one shape key
    compute the same thing in the same loops, and a record of one applies to the others
    (tune.replay maps its block names)."""
    return structural_hash(func, block_names=False)


def workload_key(func: PrimFunc, module_equality: str = "structural") -> str:
    """The database key of a function: its structural hash, or with "anchor-block" the hash
    of its dominant compute block alone (so a fused variant finds the records of the same core
    computation)."""
    if module_equality == "structural":
        return structural_hash(func)
    if module_equality == "anchor-block":
        from ...tir.anchor import anchor_key
        return anchor_key(func)
    raise TuneError(f"unknown module_equality {module_equality!r}; use one of {MODULE_EQUALITIES}")


class Database:
    """Where tuning results live. Implementations provide the five storage methods; the
    queries are shared. `module_equality` decides which workloads count as the same; under
    "structural" the queries for a function also find the records of workloads that differ
    from it in block names only (`records_like`), which tune.replay applies to it."""

    registry = Registry("database")

    def __init__(self, module_equality: str = "structural"):
        if module_equality not in MODULE_EQUALITIES:
            raise TuneError(f"unknown module_equality {module_equality!r}; use one of "
                            f"{MODULE_EQUALITIES}")
        self.module_equality = module_equality

    @classmethod
    def create(cls, spec="memory", **kwargs) -> "Database":
        """A database from its registered name ("memory", "json", "sqlite", ...), class or
        instance; options go to its constructor."""
        return cls.registry.create(spec, Database, **kwargs)

    @classmethod
    def open(cls, url, *, create: bool = False) -> "Database":
        """The database a URL names: postgresql://user:password@host:5432/dbname (a
        PostgreSQL server, needs psycopg), sqlite:///path (an SQLite file) or a work dir.
        `create`: make an SQLite database where a path holds none (else DatabaseError)."""
        from .url import open_url
        return open_url(url, create=create)

    # ------------------------------------------------------------------ storage
    def has_workload(self, func: PrimFunc) -> bool:
        """Does the database hold func's workload, or one that differs from it in block names
        only (`_holds`)?"""
        raise NotImplementedError

    def commit_workload(self, func: PrimFunc) -> Workload:
        """The stored Workload for func, adding it if new."""
        raise NotImplementedError

    def commit_tuning_record(self, record: TuningRecord) -> None:
        """Append `record`, storing its workload too if new. Once it returns, the record
        survives this process being killed; earlier records are never rewritten."""
        raise NotImplementedError

    def get_all_tuning_records(self) -> list:
        """Every record in commit order, failures included (a storing database also returns
        other processes' commits)."""
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    # ------------------------------------------------------------------ queries
    def key_of(self, func: PrimFunc) -> str:
        """func's workload key under this database's module_equality."""
        return workload_key(func, self.module_equality)

    def records_of(self, workload, target: Target | None = None) -> list:
        """Every record of the workload (a Workload or its key; failures included), oldest
        first."""
        key = workload if isinstance(workload, str) else workload.key
        tkey = None if target is None else Target.create(target).key()
        return [r for r in self.get_all_tuning_records() if r.workload.key == key
                and (tkey is None or r.target.key() == tkey)]

    def records_like(self, func: PrimFunc, target: Target | None = None) -> list:
        """Every record (failures included, oldest first) of func's workload and, under
        structural module equality, of the workloads that compute the same thing in the same
        loops under other block names: replay(record, func) applies any of them to func."""
        if self.module_equality != "structural":
            return self.records_of(self.key_of(func), target)
        key, shape = self.key_of(func), shape_key(func)
        tkey = None if target is None else Target.create(target).key()
        return [r for r in self.get_all_tuning_records()
                if (r.workload.key == key or self._shape_of(r.workload) == shape)
                and (tkey is None or r.target.key() == tkey)]

    def _holds(self, func: PrimFunc, workloads) -> bool:
        """Is func's workload among `workloads` (a {key: Workload} dict), or, under structural
        module equality, one that differs from it in block names only?"""
        if self.key_of(func) in workloads:
            return True
        if self.module_equality != "structural":
            return False
        shape = shape_key(func)
        return any(self._shape_of(wl) == shape for wl in workloads.values())

    def _shape_of(self, workload: Workload) -> str:
        shapes = self.__dict__.setdefault("_shapes", {})  # workload key -> shape key
        shape = shapes.get(workload.key)
        if shape is None:
            shape = shapes[workload.key] = shape_key(workload.func)
        return shape

    def get_top_k(self, workload, k: int | None = None, target: Target | None = None, *,
                  top_k: int | None = None) -> list:
        """The k fastest successful records of the workload (on `target` if given), whatever
        their measurement settings (query_tuning_record ranks like with like). `top_k` is
        MetaSchedule's name for k."""
        if (k is None) == (top_k is None):
            raise TuneError("get_top_k needs k (or top_k=), once")
        k = k if top_k is None else top_k
        ok = [r for r in self.records_of(workload, target) if r.ok]
        ok.sort(key=lambda r: r.median_secs)
        return ok[:k]

    def newest_record(self, func: PrimFunc, target) -> TuningRecord | None:
        """The most recently measured successful record of func (records_like) on target."""
        ok = [r for r in self.records_like(func, target) if r.ok]
        return max(enumerate(ok), key=lambda ir: (ir[1].time, ir[0]))[1] if ok else None

    def query_tuning_record(self, func: PrimFunc, target, k: int = 1, *,
                            evaluator=None) -> list:
        """The k best successful records of func (records_like) on target, ranked only
        against records measured with the same settings (`measure_settings`): those of
        `evaluator` (an EvaluatorConfig or a record's measure dict) or, by default, of the
        newest successful record, i.e. the latest tuning run. A lookup: nothing is written."""
        return rank(self.records_like(func, target), k, evaluator)

    def query_schedule(self, func: PrimFunc, target, *, evaluator=None) -> Schedule | None:
        """The best record's schedule applied to func (tune.replay), or None. Records whose
        trace no longer replays are reported and skipped, never applied. (compile_tir also
        checks the result against the unscheduled program before using it.)"""
        from ..replay import replay
        for rec in self.query_tuning_record(func, target, k=16, evaluator=evaluator):
            try:
                sch = replay(rec, func, lenient=self.module_equality == "anchor-block")
            except ScheduleError as e:
                import warnings
                warnings.warn(f"skipping a record of {func.name} whose trace does not replay: {e}",
                              DatabaseWarning)
                continue
            return sch
        return None

    def query_ir_module(self, func: PrimFunc, target, *, evaluator=None) -> PrimFunc | None:
        """The function of query_schedule's schedule, or None."""
        sch = self.query_schedule(func, target, evaluator=evaluator)
        return None if sch is None else sch.func

    def flush(self) -> None:
        """Send what waits to be sent (a SyncedDatabase's backlog); the end of a tuning run
        calls it. Nothing for a database that writes at once."""

    def close(self) -> None:
        """Release files or connections (the database stays readable by others)."""
