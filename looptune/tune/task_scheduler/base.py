"""Task schedulers share one budget (trials or seconds) across tasks. The loop is here; a
subclass only picks which task measures the next batch (`next_task_id`)."""
from __future__ import annotations

import math
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field

from ...backend import args_info
from ..builder.base import BuilderInput
from ..database.base import TuningRecord
from ..error import TuneError
from ..measure import Measurements, build_reference
from ..progress import Progress
from ..registry import Registry
from ..runner.base import EvaluatorConfig, RunnerResult


@dataclass(eq=False)
class TaskState:
    context: object                  # TuneContext
    weight: float = 1.0
    workload: object = None
    trials: int = 0                  # measured candidates, earlier runs included
    failures: int = 0
    best_secs: float = math.inf
    done: bool = False
    reference: tuple | None = None   # (artifact, symbol) of the unscheduled program
    check: bool = False              # check candidates against it (built when first needed)
    args_info: tuple = ()
    measurements: Measurements | None = None  # the measuring state of this run
    best_trace: object = None        # the trace of the best comparable record
    batch_records: list = field(default_factory=list)  # the records of the batch just measured


class TaskScheduler:
    registry = Registry("task scheduler")

    @classmethod
    def create(cls, spec="round-robin", **kwargs) -> "TaskScheduler":
        return cls.registry.create(spec, TaskScheduler, **kwargs)

    def next_task_id(self) -> int:
        """The task to measure next, or -1 when every task is done."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the loop
    def tune(self, contexts, *, task_weights=None, max_trials_global: int,
             max_trials_per_task: int | None, num_trials_per_iter: int, builder, runner,
             database, evaluator: EvaluatorConfig, max_time_s: float | None = None,
             check_correctness: bool = True, abort_ratio: float = 3.0,
             progress: bool = True, measure_callbacks=()) -> list:
        """Tune every task until its trials, the global trials or the time run out. Every
        measurement is committed as soon as it is made. Returns the task states."""
        weights = list(task_weights) if task_weights is not None else [1.0] * len(contexts)
        if len(weights) != len(contexts) or any(not w > 0 for w in weights):
            raise TuneError(f"task_weights must be one positive number per task ({len(contexts)} "
                            f"tasks), got {weights}")
        self.tasks = [TaskState(c, w) for c, w in zip(contexts, weights)]
        self.max_trials_global = max_trials_global
        self.start = time.time()
        self.run_id = uuid.uuid4().hex[:12]  # every record of this call says so (`run_info`)
        self.max_time_s = max_time_s
        per_task = max_trials_per_task or max_trials_global
        self.progress = Progress(max_trials_global, max_time_s, enabled=progress)
        # wall seconds per phase: "search" (design spaces, candidates, learning), "build"
        # (lowering and compiling), "run" (measuring), "database" (commits)
        self.phase_secs = {"search": 0.0, "build": 0.0, "run": 0.0, "database": 0.0}
        self.measured_this_run = 0
        with self._phase("search"):
            for t in self.tasks:
                self._prepare(t, database, builder, per_task, num_trials_per_iter,
                              check_correctness, evaluator)
            for t in self.tasks:
                self._share_best(t)
        try:
            while not self._out_of_budget():
                tid = self.next_task_id()
                if tid < 0:
                    break
                task = self.tasks[tid]
                with self._phase("search"):
                    cands = task.context.search_strategy.generate_measure_candidates()
                if not cands:
                    task.done = True
                    continue
                best_before = task.best_secs
                results = self._measure(task, cands, builder, runner, database, evaluator,
                                        abort_ratio)
                if task.best_secs < best_before:
                    self._share_best(task)
                with self._phase("search"):
                    task.context.search_strategy.notify_runner_results(cands, results)
                for cb in measure_callbacks:
                    cb(task, cands, results)
        finally:
            self.progress.close()
            self.progress.note(f"time spent: {self.phase_summary()}")
            for t in self.tasks:
                t.context.search_strategy.post_tuning()
        return self.tasks

    def _share_best(self, task: TaskState) -> None:
        """Offer a task's best schedule to the tasks whose design spaces look the same (the
        same loops tiled, e.g. one convolution with different fused epilogues): each tries
        those decisions in its next batch."""
        if task.best_trace is None:
            return
        sig = task.context.search_strategy.signature()
        if sig is None:
            return
        for other in self.tasks:
            if other is not task and not other.done \
                    and other.context.search_strategy.signature() == sig:
                other.context.search_strategy.offer(task.best_trace)

    @contextmanager
    def _phase(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.phase_secs[name] += time.perf_counter() - t0

    def phase_summary(self) -> str:
        total = sum(self.phase_secs.values()) or 1.0
        return ", ".join(f"{k} {v:.1f} s ({100 * v / total:.0f}%)"
                         for k, v in self.phase_secs.items())

    def total_trials(self) -> int:
        return sum(t.trials for t in self.tasks)

    def _out_of_budget(self) -> bool:
        if self.total_trials() >= self.max_trials_global:
            return True
        return self.max_time_s is not None and time.time() - self.start >= self.max_time_s

    def _prepare(self, t: TaskState, database, builder, per_task, per_iter, check, evaluator):
        ctx = t.context
        ctx.deadline = self.start + self.max_time_s if self.max_time_s else None
        t.workload = database.commit_workload(ctx.func)
        done = database.records_of(t.workload, ctx.target)
        t.trials = len(done)
        t.failures = sum(not r.ok for r in done)
        settings = evaluator.to_json()
        comparable = [r for r in done if all(r.measure.get(k) == v for k, v in settings.items())]
        best = min(comparable, key=lambda r: r.median_secs, default=None)
        if best is not None and best.ok:
            t.best_secs, t.best_trace = best.median_secs, best.trace
        t.args_info = args_info(ctx.func)
        seen = {r.sch_hash for r in done if r.sch_hash}
        spaces = ctx.generate_design_space()
        ctx.search_strategy.pre_tuning(max_trials=max(0, per_task - t.trials),
                                       num_trials_per_iter=per_iter, design_spaces=spaces,
                                       database=database, seen=seen)
        t.check = check

    def _reference(self, t: TaskState, builder) -> tuple | None:
        """The unscheduled program to check candidates against, built before the first
        candidate is (a run answered from a simulation table builds nothing)."""
        if t.check and t.reference is None:
            ctx = t.context
            t.reference = build_reference(builder, ctx.func, ctx.target, ctx.task_name)
        return t.reference

    def run_info(self, ctx) -> dict:
        """What every record of this run says about it (`measure["run"]`), so that reports
        can tell runs and strategies apart: an id per tune() call, when it started, the task,
        the search strategy (and cost model) and the seed."""
        strat = ctx.search_strategy
        name = getattr(strat, "registered_name", type(strat).__name__)
        model = getattr(strat, "cost_model", None)
        if model is not None:
            name += "/" + getattr(model, "registered_name", type(model).__name__)
        return {"id": self.run_id, "start": self.start, "task": ctx.task_name,
                "strategy": name, "seed": ctx.seed}

    def _measure(self, task: TaskState, cands, builder, runner, database, evaluator,
                 abort_ratio) -> list:
        ctx = task.context
        meta = {"workload": task.workload.key}
        t0 = time.perf_counter()
        known = [None if c.refused else runner.recall(task.workload.key, c.sch_hash, ctx.target)
                 for c in cands]
        self.phase_secs["run"] += time.perf_counter() - t0
        to_build = [c for c, k in zip(cands, known) if k is None and not c.refused]
        t0 = time.perf_counter()
        reference = self._reference(task, builder) if to_build else None
        built = iter(builder.build([BuilderInput(c.sch.func, ctx.target,
                                                 {**meta, "trace": f"{len(c.sch.trace)} instructions"},
                                                 lowered=c.lowered(ctx.target)) for c in to_build])
                     if to_build else ())
        self.phase_secs["build"] += time.perf_counter() - t0
        run_info = self.run_info(ctx)
        if task.measurements is None:
            task.measurements = Measurements(runner, evaluator, task.args_info, ctx.seed,
                                             task.workload.key, abort_ratio)
        meas = task.measurements
        results = []
        task.batch_records = []
        for cand, res in zip(cands, known):
            if self._out_of_budget() and self.measured_this_run:  # a run measures at least one
                break
            self.measured_this_run += 1
            if cand.refused:
                res = RunnerResult(None, "schedule_error", cand.refused)
            b = next(built) if res is None else None
            if b is not None:  # not recalled: the runner needs the build
                t0 = time.perf_counter()
                res = meas.run(b, cand.sch, cand.sch_hash, best_secs=task.best_secs,
                               reference=reference)
                self.phase_secs["run"] += time.perf_counter() - t0
            measure = meas.settings(res, b.source_hash if b else None)
            record = TuningRecord(
                workload=task.workload, trace=cand.trace, run_secs=res.run_secs,
                target=ctx.target, args_info=task.args_info, measure={**measure, "run": run_info},
                error_class=res.error_class, error_msg=res.error_msg,
                sch_hash=None if cand.refused else cand.sch_hash)
            with self._phase("database"):
                database.commit_tuning_record(record)
            task.batch_records.append(record)
            task.trials += 1
            if record.ok:
                if record.median_secs < task.best_secs:
                    task.best_secs, task.best_trace = record.median_secs, record.trace
            else:
                task.failures += 1
            results.append(res)
            self.progress.update(task=ctx.task_name, done=self.total_trials(),
                                 best_secs=task.best_secs if math.isfinite(task.best_secs) else None,
                                 flops=ctx.flops, failures=sum(t.failures for t in self.tasks))
        return results
