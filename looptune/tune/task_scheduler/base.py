"""Task schedulers share one budget (trials or seconds) across tasks. The loop is here; a
subclass only picks which task measures the next batch (`next_task_id`). Before the first
trial, the loop can time each task's default schedule (a baseline record) and plans the
warm-up round (warmup.py): how many trials each task's first batch gets."""
from __future__ import annotations

import math
import time
import uuid
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

from ...backend import args_info
from ...tir.structural import structural_hash
from .. import cpu_share
from ..builder.base import BuilderInput
from ..database.base import TuningRecord
from ..error import BudgetWarning, TuneError
from ..measure import Measurements, build_reference
from ..progress import Progress
from ..registry import Registry
from ..runner.base import EvaluatorConfig, RunnerResult
from .warmup import SECONDS_PER_TRIAL, WarmupPlan, estimated_cost, plan_warmup

# trials below which tuning one kernel warns up front: the evolutionary search needed a
# median of 15 to match the best of 256 random ones (matmul_add 1024,
# benchmarks/search_efficiency.py); a model's tasks share the budget by the warm-up plan
MIN_USEFUL_TRIALS = 16


@dataclass(eq=False)
class TaskState:
    """What the task scheduler knows of one task during a run: its trials, best time,
    failures, reference and the last batch's records."""

    context: object                  # TuneContext
    weight: float = 1.0
    workload: object = None
    trials: int = 0                  # measured candidates, earlier runs included
    prior_trials: int = 0            # those of earlier runs
    batches: int = 0                 # batches measured in this run
    default_secs: float = math.inf   # the default schedule's time (its baseline record)
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
    """The tuning loop over many tasks. A subclass implements `next_task_id` (which task
    measures the next batch) and registers with `@TaskScheduler.registry.register("name")`;
    `self.tasks` (TaskState) is what it decides from."""

    registry = Registry("task scheduler")
    plan: WarmupPlan | None = None   # this run's warm-up (set by tune)

    def __init__(self, *, min_first: int = 4, warmup_share: float = 0.5,
                 seconds_per_trial: float = SECONDS_PER_TRIAL):
        """`min_first`: the smallest first batch that covers a task; `warmup_share`: the
        part of the budget the warm-up round may take (warmup.py); `seconds_per_trial`: what
        a trial is expected to cost, to turn a time budget into trials for the warm-up."""
        if min_first < 1 or not 0 < warmup_share <= 1 or seconds_per_trial <= 0:
            raise ValueError("a task scheduler needs min_first >= 1, 0 < warmup_share <= 1 "
                             "and seconds_per_trial > 0")
        self.min_first = min_first
        self.warmup_share = warmup_share
        self.seconds_per_trial = seconds_per_trial

    @classmethod
    def create(cls, spec="round-robin", **kwargs) -> "TaskScheduler":
        """A task scheduler from its registered name ("gradient", "round-robin"), class or
        instance."""
        return cls.registry.create(spec, TaskScheduler, **kwargs)

    def next_task_id(self) -> int:
        """The task to measure next, or -1 when every task is done."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the loop
    def tune(self, contexts, *, task_weights=None, max_trials_global: int,
             max_trials_per_task: int | None, num_trials_per_iter: int, builder, runner,
             database, evaluator: EvaluatorConfig, max_time_s: float | None = None,
             check_correctness: bool = True, abort_ratio: float = 3.0,
             progress: bool = True, measure_callbacks=(), default_schedule=None) -> list:
        """Tune every task until its trials, the global trials or the time run out. Every
        measurement is committed as soon as it is made. `default_schedule(func, target)`
        (a Schedule), if given, is timed first for each task without one measured with these
        settings: a baseline record that a tuned record must beat to be used. Returns the
        task states."""
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
        self.machines_seen: set = set()  # fingerprint ids of the machines that measured
        self._last_task = None
        with self._phase("search"):
            for t in self.tasks:
                self._prepare(t, database, builder, per_task, num_trials_per_iter,
                              check_correctness, evaluator)
        if default_schedule is not None:
            self._measure_defaults(default_schedule, builder, runner, database, evaluator,
                                   abort_ratio)
        self.plan = self._plan_warmup(per_task, num_trials_per_iter)
        self._announce()
        with self._phase("search"):
            for t in self.tasks:
                self._share_best(t)
        try:
            while not self._out_of_budget():
                tid = self.next_task_id()
                if tid < 0:
                    break
                task = self.tasks[tid]
                with self._phase("search"):
                    cands = task.context.search_strategy.generate_measure_candidates(
                        self.batch_size(tid))
                if not cands:
                    task.done = True
                    self._say_why_stopped(task)
                    continue
                best_before = task.best_secs
                results = self._measure(task, cands, builder, runner, database, evaluator,
                                        abort_ratio)
                task.batches += 1
                if task.best_secs < best_before:
                    self._share_best(task)
                with self._phase("search"):
                    task.context.search_strategy.notify_runner_results(cands, results)
                for cb in measure_callbacks:
                    cb(task, cands, results)
        finally:
            self._show_progress(self._last_task, force=True)  # the line ends current
            self.progress.close()
            self.progress.note(f"time spent: {self.phase_summary()}")
            for t in self.tasks:
                t.context.search_strategy.post_tuning()
        return self.tasks

    def _say_why_stopped(self, task) -> None:
        """A task that stops before the run's budget is spent says why, once."""
        if self._out_of_budget():
            return
        why = task.context.search_strategy.stop_reason or "its search strategy has no more " \
            "candidates"
        self.progress.note(f"{task.context.task_name}: stopped after {task.trials} trials: "
                           f"{why}")

    # ------------------------------------------------------------------ the warm-up
    def batch_size(self, tid: int) -> int | None:
        """Trials of task tid's next batch: its warm-up batch first, then the plan's batch
        (None without a plan: the strategy's num_trials_per_iter)."""
        if self.plan is None:
            return None
        first = self.plan.first[tid]
        return first if first and not self.tasks[tid].batches else self.plan.batch

    def warmup_order(self) -> list:
        """The tasks still waiting for their warm-up batch, largest share first."""
        if self.plan is None:
            return []
        return [i for i in self.plan.order if not self.tasks[i].done and not self.tasks[i].batches]

    def shares(self) -> list:
        """Each task's estimated part of the weighted objective: weight x its default
        schedule's time where measured, else weight x an estimate from FLOPs and bytes,
        scaled by the measured tasks' median seconds per unit of estimate."""
        cost = [estimated_cost(t.context.flops, sum(_nbytes(a) for a in t.args_info))
                for t in self.tasks]
        ratios = sorted(t.default_secs / c for t, c in zip(self.tasks, cost)
                        if math.isfinite(t.default_secs))
        scale = ratios[len(ratios) // 2] if ratios else 1.0
        return [t.weight * (t.default_secs if math.isfinite(t.default_secs) else c * scale)
                for t, c in zip(self.tasks, cost)]

    def budget_left(self) -> int:
        """Trials this run can still spend: the trial budget, or under a time budget the
        trials that fit the time left at `seconds_per_trial` each, if fewer (a run given
        100000 trials and ten minutes plans its warm-up for ten minutes of trials)."""
        left = self.max_trials_global - self.total_trials()
        if self.max_time_s is not None:
            time_left = self.max_time_s - (time.time() - self.start)
            left = min(left, max(0, int(time_left / self.seconds_per_trial)))
        return left

    def _plan_warmup(self, per_task: int, per_iter: int) -> WarmupPlan:
        caps = [0 if t.done or t.trials else max(0, per_task - t.trials) for t in self.tasks]
        return plan_warmup(self.shares(), caps,
                           budget=self.budget_left(),
                           per_iter=per_iter, min_first=self.min_first,
                           warmup_share=self.warmup_share)

    def _announce(self) -> None:
        """Say up front what the budget covers: a line, and a BudgetWarning if it cannot give
        every task a first batch."""
        plan, spent = self.plan, self.total_trials()
        if len(self.tasks) > 1:
            line = plan.summary(spent)
            if plan.budget < self.max_trials_global - spent:
                line += (f" (the time limit of {self.max_time_s:.0f} s fits about {plan.budget} "
                         f"trials at {self.seconds_per_trial:g} s each)")
            self.progress.note(line)
        short = plan.shortfall([t.context.task_name for t in self.tasks], spent)
        one = self.tasks[0] if len(self.tasks) == 1 else None  # a kernel, not a model
        if not short and one is not None and not one.done and not one.trials and \
                plan.budget < MIN_USEFUL_TRIALS:
            short = (f"a budget of {plan.budget} trials is too small for the search to help: "
                     f"it needs about {MIN_USEFUL_TRIALS} to beat random sampling "
                     f"(max_trials_global={spent + MIN_USEFUL_TRIALS}, --trials; 64 or more "
                     "for the cost model to learn)")
        if short:
            warnings.warn(short, BudgetWarning, stacklevel=4)

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
        """Where this run's time went: search, build, run and database seconds and shares."""
        total = sum(self.phase_secs.values()) or 1.0
        return ", ".join(f"{k} {v:.1f} s ({100 * v / total:.0f}%)"
                         for k, v in self.phase_secs.items())

    def total_trials(self) -> int:
        """Trials measured by all tasks, earlier runs included."""
        return sum(t.trials for t in self.tasks)

    def touched(self) -> tuple:
        """(tasks with at least one trial, all tasks): the progress line's "tasks 23/40"."""
        return sum(t.trials > 0 for t in self.tasks), len(self.tasks)

    def _out_of_budget(self) -> bool:
        if self.total_trials() >= self.max_trials_global:
            return True
        return self.max_time_s is not None and time.time() - self.start >= self.max_time_s

    def _prepare(self, t: TaskState, database, builder, per_task, per_iter, check, evaluator):
        ctx = t.context
        ctx.deadline = self.start + self.max_time_s if self.max_time_s else None
        t.workload = database.commit_workload(ctx.func)
        done = database.records_of(t.workload, ctx.target)
        settings = evaluator.to_json()
        comparable = [r for r in done if all(r.measure.get(k) == v for k, v in settings.items())]
        t.default_secs = min((r.median_secs for r in comparable if r.baseline), default=math.inf)
        done = [r for r in done if not r.baseline]  # a baseline is not a trial
        comparable = [r for r in comparable if not r.baseline]
        t.trials = t.prior_trials = len(done)
        t.failures = sum(not r.ok for r in done)
        best = min(comparable, key=lambda r: r.median_secs, default=None)
        if best is not None and best.ok:
            t.best_secs, t.best_trace = best.median_secs, best.trace
        t.best_secs = min(t.best_secs, t.default_secs)
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

    def run_info(self, ctx, prior_trials: int = 0) -> dict:
        """What every record of this run says about it (`measure["run"]`), so that reports
        can tell runs and strategies apart: an id per tune() call, when it started, the task,
        the search strategy (and cost model), the seed, and the task's trials in the database
        before it (a resumed run goes on from there)."""
        strat = ctx.search_strategy
        name = getattr(strat, "registered_name", type(strat).__name__)
        model = getattr(strat, "cost_model", None)
        if model is not None:
            name += "/" + getattr(model, "registered_name", type(model).__name__)
        return {"id": self.run_id, "start": self.start, "task": ctx.task_name,
                "strategy": name, "seed": ctx.seed, "prior_trials": prior_trials}

    def _measurements(self, task: TaskState, runner, evaluator, abort_ratio) -> Measurements:
        if task.measurements is None:
            ctx = task.context
            task.measurements = Measurements(runner, evaluator, task.args_info, ctx.seed,
                                             task.workload.key, abort_ratio)
        return task.measurements

    def _measure_defaults(self, default_schedule, builder, runner, database, evaluator,
                          abort_ratio) -> None:
        """Time the default schedule of every task that has no baseline measured with these
        settings, all built at once. Each time is committed as a baseline record
        (`TuningRecord.baseline`): it is not a trial and costs no budget, and it gives the
        warm-up its shares. It is measured unchecked; compile_tir verifies any record it
        applies, a baseline as much as a tuned one."""
        todo = []
        with self._phase("search"):
            for t in self.tasks:
                if math.isfinite(t.default_secs):
                    continue
                try:
                    sch = default_schedule(t.context.func, t.context.target)
                except Exception as e:  # noqa: BLE001 - no baseline; tuning goes on
                    self.progress.note(f"{t.context.task_name}: no default schedule to time "
                                       f"({type(e).__name__}: {e})")
                    continue
                todo.append((t, sch))
        if not todo:
            return
        with self._phase("build"):
            built = builder.build([BuilderInput(sch.func, t.context.target,
                                                {"workload": t.workload.key,
                                                 "trace": "default schedule"})
                                   for t, sch in todo])
        for (t, sch), b in zip(todo, built):
            meas = self._measurements(t, runner, evaluator, abort_ratio)
            sch_hash = structural_hash(sch.func)
            with self._phase("run"):
                res = meas.run(b, sch, sch_hash, best_secs=math.inf, reference=None)
            measure = {**meas.settings(res, b.source_hash if b.ok else None),
                       "run": self.run_info(t.context, t.prior_trials),
                       "baseline": "default schedule"}
            record = TuningRecord(
                workload=t.workload, trace=sch.trace, run_secs=res.run_secs,
                target=t.context.target, args_info=t.args_info, measure=measure,
                error_class=res.error_class, error_msg=res.error_msg, sch_hash=sch_hash)
            with self._phase("database"):
                database.commit_tuning_record(record)
            if record.ok:
                t.default_secs = record.median_secs
                t.best_secs = min(t.best_secs, t.default_secs)

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
        inputs = [BuilderInput(c.sch.func, ctx.target,
                               {**meta, "trace": f"{len(c.sch.trace)} instructions"},
                               lowered=c.lowered(ctx.target)) for c in to_build]
        self.phase_secs["build"] += time.perf_counter() - t0
        meas = self._measurements(task, runner, evaluator, abort_ratio)
        if getattr(runner, "parallel", False) and to_build:
            with self._phase("build"):
                built = iter(builder.build(inputs))
            built, measured = self._measure_at_once(task, cands, known, built, meas, reference)
            return self._record_batch(task, cands, known, database, built, meas, reference,
                                      measured)
        # each candidate is measured as soon as it is built, the next ones compiling on the
        # CPUs the measurement leaves free (cpu_share.py), or the batch is built first
        share = cpu_share.plan(builder, runner, evaluator.num_threads, ctx.target) \
            if to_build else None
        if share is None:
            with self._phase("build"):
                built = iter(builder.build(inputs) if inputs else ())
            return self._record_batch(task, cands, known, database, built, meas, reference,
                                      None)
        with cpu_share.pinned(share.others):
            runner.pin(share.measuring)
            try:
                with self._phase("build"):
                    stream = builder.build_stream(inputs, share)
                with stream:
                    return self._record_batch(task, cands, known, database, stream, meas,
                                              reference, None, share)
            finally:
                runner.pin(None)

    def _record_batch(self, task: TaskState, cands, known, database, built, meas, reference,
                      measured, share=None) -> list:
        """Measure (or take from `measured`) and commit the record of each candidate in
        order, until the budget is spent; `built` gives the builds of those not `known`."""
        ctx = task.context
        run_info = self.run_info(ctx, task.prior_trials)
        at_once = measured is not None
        results = []
        task.batch_records = []
        for cand, res in zip(cands, known):
            # a run measures at least one; what was measured at once is all recorded
            spent = self.total_trials() >= self.max_trials_global if at_once \
                else self._out_of_budget()
            if spent and self.measured_this_run:
                break
            self.measured_this_run += 1
            if cand.refused:
                res = RunnerResult(None, "schedule_error", cand.refused)
            b = None
            if res is None:  # not recalled: the runner needs the build
                with self._phase("build"):
                    b = next(built)
                t0 = time.perf_counter()
                if at_once:
                    res = next(measured)
                else:
                    with share.measuring_now() if share is not None else nullcontext():
                        res = meas.run(b, cand.sch, cand.sch_hash, best_secs=task.best_secs,
                                       reference=reference)
                self.phase_secs["run"] += time.perf_counter() - t0
            self._note_machine(res)
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
            self._show_progress(task)
        return results

    def _measure_at_once(self, task: TaskState, cands, known, built, meas, reference) -> tuple:
        """(the builds, their results) of the candidates this batch will record, measured in
        one call of a runner that spreads them over many devices (`Runner.parallel`): those
        the trial budget leaves room for, at least one."""
        room = max(self.max_trials_global - self.total_trials(), 0 if self.measured_this_run
                   else 1)
        builds = list(built)
        items, it = [], iter(builds)
        for cand, k in list(zip(cands, known))[:room]:
            if k is None and not cand.refused:
                items.append((next(it), cand.sch, cand.sch_hash))
        t0 = time.perf_counter()
        results = meas.run_many(items, best_secs=task.best_secs, reference=reference)
        self.phase_secs["run"] += time.perf_counter() - t0
        return iter(builds), iter(results)

    def _note_machine(self, res: RunnerResult) -> None:
        """Say once per run which machine a remote runner's results come from, for each new
        one (records of different machines are never ranked together)."""
        fp = res.machine
        if fp is None:
            return
        if fp.get("id") not in self.machines_seen:
            self.machines_seen.add(fp.get("id"))
            from ...target.machine import describe
            self.progress.note(f"measuring on {describe(fp)}")

    def _show_progress(self, task, *, force: bool = False) -> None:
        self._last_task = task
        if task is None:
            return
        self.progress.update(task=task.context.task_name, done=self.total_trials(),
                             best_secs=task.best_secs if math.isfinite(task.best_secs) else None,
                             flops=task.context.flops,
                             failures=sum(t.failures for t in self.tasks),
                             tasks=self.touched(), force=force)


def _nbytes(arg) -> int:
    n = 1
    for d in arg.shape:
        n *= int(d)
    return n * (int("".join(c for c in arg.dtype if c.isdigit()) or 32) // 8)
