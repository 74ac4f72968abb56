"""Ansor's names (TVM's auto_scheduler) for looptune's template-free tuning, so that an Ansor
script runs with `import looptune as tvm; from looptune import te, auto_scheduler`:

    @auto_scheduler.register_workload      task = auto_scheduler.SearchTask(func=, args=, target=)
    auto_scheduler.TuningOptions(num_measure_trials=, measure_callbacks=[RecordToFile(log)])
    task.tune(tune_option)                 sch, args = task.apply_best(log)
    task.print_best(log)                   SketchPolicy(task, XGBModel(), init_search_callbacks=
                                               [PreloadMeasuredStates(log)])

Every name is a thin spelling of the one engine: a SearchTask is a tune.Task, a log is a
JSON database (the records, one per line, in the log file; the workloads beside it in
`<log>.workloads`), tuning is tune_tir, and apply_best is compile_tir (the best record is
checked against the unscheduled program before it is applied). Where looptune differs from
Ansor (docs/tvm_names.md): `num_measure_trials` counts new trials, and a log is always read
before tuning, so a second `task.tune` continues from it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .te.tensor import ComputeOp, PlaceholderOp
from .tir.expr import Reduce
from .tir.printer import expr_str
from .tune import JSONDatabase, MemoryDatabase, TuneError, compile_tir, tune_tir
from .tune.cost_model.base import CostModel
from .tune.database.base import Database
from .tune.runner.base import EvaluatorConfig
from .tune.task import Task, register_workload as _register

__all__ = ["ComputeDAG", "LocalBuilder", "LocalRunner", "PreloadMeasuredStates", "RandomModel",
           "RecordToFile", "SearchTask", "SketchPolicy", "TuningOptions", "XGBModel",
           "load_records", "register_workload"]


def register_workload(func_name=None, f=None, override: bool = True):
    """`@register_workload` or `register_workload("name", f)`: a function returning
    [inputs..., outputs...] te tensors becomes a named workload (a name registered again is
    replaced, as a re-run notebook cell expects)."""
    if callable(func_name):
        return _register(func_name)
    if f is not None:
        return _register(f, name=func_name)
    return lambda fn: _register(fn, name=func_name)


def log_database(log_file) -> JSONDatabase:
    """The JSON database of an Ansor log file: records in `log_file`, one per line, and their
    workloads in `<log_file>.workloads`."""
    p = Path(log_file)
    return JSONDatabase(path_tuning_record=p, path_workload=p.with_name(p.name + ".workloads"))


# ----------------------------------------------------------------------------- options
@dataclass(frozen=True)
class RecordToFile:
    """Keep every measured record in the log file `filename` (a JSON database)."""

    filename: str


@dataclass(frozen=True)
class PreloadMeasuredStates:
    """Resume from `filename`: its records of the task count as measured (never measured
    again) and train the cost model before the first new trial."""

    filename: str


@dataclass(frozen=True)
class LocalBuilder:
    """Builds candidates in this process's thread pool (`timeout` seconds each)."""

    timeout: float = 15.0
    n_parallel: int | None = None


@dataclass(frozen=True)
class LocalRunner:
    """Times candidates in an isolated worker process (tune.runner.LocalRunner)."""

    timeout: float = 10.0
    number: int = 1
    repeat: int = 5
    min_repeat_ms: float = 20.0
    enable_cpu_cache_flush: bool = False

    def evaluator(self) -> EvaluatorConfig:
        return EvaluatorConfig(number=self.number, repeat=self.repeat,
                               min_repeat_ms=self.min_repeat_ms,
                               enable_cpu_cache_flush=self.enable_cpu_cache_flush)


@dataclass(frozen=True)
class TuningOptions:
    """`num_measure_trials` new candidates to measure, `num_measures_per_round` a batch;
    `verbose` 0 hides the progress line; `measure_callbacks`: RecordToFile(log) keeps the
    records (without one they live in memory for this session)."""

    num_measure_trials: int = 0
    early_stopping: int | None = None
    num_measures_per_round: int = 64
    verbose: int = 1
    builder: object = "local"
    runner: object = "local"
    measure_callbacks: tuple = field(default=())

    def __post_init__(self):
        object.__setattr__(self, "measure_callbacks", tuple(self.measure_callbacks or ()))
        for cb in self.measure_callbacks:
            if not isinstance(cb, RecordToFile):
                raise TuneError(f"measure_callbacks: {cb!r} is not auto_scheduler.RecordToFile"
                                "(log_file), the one callback looptune's Ansor names take")


def XGBModel(**_options) -> CostModel:  # noqa: N802 - TVM's class name
    """The engine's XGBoost cost model (Ansor's options are accepted and not needed)."""
    return CostModel.create("xgb")


def RandomModel(**_options) -> CostModel:  # noqa: N802 - TVM's class name
    return CostModel.create("random")


@dataclass(frozen=True, eq=False)
class SketchPolicy:
    """Ansor's search policy: looptune's evolutionary search over its sketch rules, ranked by
    `program_cost_model`; `init_search_callbacks=[PreloadMeasuredStates(log)]` resumes."""

    task: "SearchTask"
    program_cost_model: object = None
    params: dict | None = None
    seed: int | None = None
    verbose: int = 1
    init_search_callbacks: tuple = ()

    def preload_files(self) -> list:
        out = []
        for cb in self.init_search_callbacks or ():
            if not isinstance(cb, PreloadMeasuredStates):
                raise TuneError(f"init_search_callbacks: {cb!r} is not "
                                "auto_scheduler.PreloadMeasuredStates(log_file)")
            out.append(cb.filename)
        return out


# ----------------------------------------------------------------------------- the DAG
class ComputeDAG:
    """The tensors of a workload, printed as Ansor prints them (one line per stage)."""

    def __init__(self, tensors):
        self.tensors = list(tensors)

    def __str__(self):
        lines, seen = [], set()

        def visit(t):
            if id(t) in seen:
                return
            seen.add(id(t))
            op = t.op
            if isinstance(op, PlaceholderOp):
                lines.append(f"{t.name} = PLACEHOLDER {list(t.shape)}")
                return
            for x in op.inputs:
                visit(x)
            lines.append(_stage_line(t.name, op))

        for t in self.tensors:
            visit(t)
        return "\n".join(lines) + "\n"

    __repr__ = __str__


def _stage_line(name: str, op: ComputeOp) -> str:
    idx = ", ".join(iv.var.name for iv in op.axis)
    body = op.body
    if isinstance(body, Reduce):
        sign = {"sum": "+=", "prod": "*=", "max": "max=", "min": "min="}[body.combiner]
        return f"{name}({idx}) {sign} {expr_str(body.source)}"
    return f"{name}({idx}) = {expr_str(body)}"


# ----------------------------------------------------------------------------- the task
class SearchTask:
    """One workload with concrete arguments, for one target (`llvm`, `llvm -mcpu=...`)."""

    def __init__(self, func=None, args=(), compute_dag=None, workload_key=None, target=None,
                 **_options):
        if func is None:
            raise TuneError("SearchTask needs func= (a registered workload function or its "
                            "name); compute_dag= and workload_key= alone are not supported")
        self.task = Task(func, tuple(args), target=target if target is not None else "llvm")
        self.target = self.task.target
        self.args = self.task.args
        self.func = self.task.func
        self.workload_key = self.task.name
        self.desc = self.task.name
        self.tensors = self.task.tensors
        self.compute_dag = ComputeDAG(self.tensors)

    def __repr__(self):
        return f"SearchTask({self.task.name}, target={self.target})"

    def _database(self, options: TuningOptions, preload) -> Database:
        logs = [cb.filename for cb in options.measure_callbacks]
        db = log_database(logs[0]) if logs else MemoryDatabase()
        mine = {str(Path(p).resolve()) for p in logs}
        for p in preload:
            if str(Path(p).resolve()) in mine:
                continue  # the log tuning reads anyway
            src = log_database(p)
            for rec in src.records_like(self.func, self.target):
                db.commit_tuning_record(rec)
        return db

    def tune(self, tuning_options: TuningOptions, search_policy: SketchPolicy | None = None):
        """Measure `num_measure_trials` new candidates (the log's earlier records are known
        and not measured again), keeping the records in the RecordToFile log."""
        opts = tuning_options
        policy = search_policy or SketchPolicy(self)
        db = self._database(opts, policy.preload_files())
        done = [r for r in db.records_of(db.key_of(self.func), self.target) if not r.baseline]
        if opts.num_measure_trials <= 0:
            return db
        runner = opts.runner if isinstance(opts.runner, LocalRunner) else None
        tune_tir(self.func, self.target, None, database=db,
                 max_trials_global=len(done) + opts.num_measure_trials,
                 num_trials_per_iter=min(opts.num_measures_per_round, opts.num_measure_trials),
                 cost_model=policy.program_cost_model, seed=policy.seed,
                 task_name=self.task.name, progress=opts.verbose > 0,
                 evaluator=runner.evaluator() if runner else None)
        return db

    def _compile(self, log_file):
        return compile_tir(log_database(log_file), self.func, self.target)

    def apply_best(self, log_file, include_compatible: bool = False, layout_rewrite_option=None):
        """(schedule, args) of the best record in the log, checked against the unscheduled
        program first; `looptune.build(sch, args, target)` compiles it."""
        return self._compile(log_file).schedule, list(self.tensors)

    def print_best(self, log_file, print_mode: str = "schedule") -> str:
        """The best schedule as looptune Python schedule code (print_mode="schedule"), or
        its C source ("cuda" / "c"). Returned, as Ansor does, not printed."""
        mod = self._compile(log_file)
        if print_mode != "schedule":
            return mod.source
        rec = mod.record
        head = f"# {self.task.name}: {rec.median_secs * 1e3:.4f} ms on {rec.target}\n"
        return head + rec.trace.simplified().as_python()


def load_records(log_file) -> list:
    """Every record of an Ansor log (a looptune JSON database), oldest first."""
    return log_database(log_file).get_all_tuning_records()
