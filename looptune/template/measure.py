"""AutoTVM's measurement API over the engine's parts. A MeasureInput is a template config as
a measure candidate of the tuning engine: the task scheduler builds it with tune's Builder
and measures it with tune's Runner exactly as tune_tir's candidates are (checked against the
unscheduled program, identical binaries measured once, a candidate far slower than the best
timed once, every failure a classified record). A MeasureResult is a RunnerResult with its
TuningRecord, as the tuners' callbacks see it.

`measure_option(builder, runner)` holds the parts; a tuner may instead be given any function
`measure(inputs) -> results` (a fake timer for tests, a cost formula, ...).
"""
from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass, field
from functools import cached_property

from ..build import args_info
from ..schedule import ScheduleError
from ..tir.structural import structural_hash
from ..tune.builder.base import Builder
from ..tune.builder.local import LocalBuilder as _LocalBuilder
from ..tune.database.base import ERROR_CLASSES, TuningRecord
from ..tune.error import TuneError
from ..tune.runner.base import EvaluatorConfig, Runner, RunnerResult
from ..tune.runner.local import LocalRunner as _LocalRunner
from ..tune.search_strategy.base import MeasureCandidate


class MeasureInput(MeasureCandidate):
    """One config of a task to measure. Its schedule is made - the template run with the
    config's knob decisions - when first asked for; a config that a primitive of the template
    refuses is `refused` (recorded as a schedule_error, never built)."""

    def __init__(self, task, config):
        self.task = task        # TemplateTask
        self.config = config    # ConfigEntity
        self._loops = None

    @property
    def target(self):
        return self.task.target

    @cached_property
    def _instance(self):
        try:
            return self.task.instantiate(self.config)[0]
        except ScheduleError as e:
            return e

    @property
    def sch(self):
        """The template's schedule for this config (ScheduleError if a primitive refuses it)."""
        if isinstance(self._instance, ScheduleError):
            raise self._instance
        return self._instance

    @cached_property
    def sch_hash(self) -> str:
        return structural_hash(self.sch.func)

    @property
    def refused(self) -> str | None:
        if isinstance(self._instance, ScheduleError):
            return f"config #{self.config.index} does not apply: {self._instance}"
        return None

    @property
    def trace(self):
        """The schedule's trace, or the knobs alone for a config that does not apply."""
        if self.refused:
            return self.task.config_trace(self.config)
        return self.sch.trace

    def __repr__(self):
        return f"MeasureInput({self.task.name}, config #{self.config.index})"


@dataclass(frozen=True)
class MeasureResult:
    """Seconds per call (one per repeat) or the failure; `record` is what a log stores."""

    costs: tuple | None = None
    error_class: str | None = None     # one of tune.database.ERROR_CLASSES
    error_msg: str | None = None
    aborted_early: bool = False        # timed once: far slower than the best so far
    record: TuningRecord | None = None
    timestamp: float = field(default_factory=time.time)

    @staticmethod
    def from_runner(res: RunnerResult, record: TuningRecord | None = None) -> "MeasureResult":
        return MeasureResult(res.run_secs if res.ok else None, res.error_class, res.error_msg,
                             res.aborted_early, record)

    @property
    def ok(self) -> bool:
        return self.costs is not None and self.error_class is None

    @property
    def secs(self) -> float:
        """The median run time; infinity for a failure."""
        if not self.ok or not self.costs:
            return math.inf
        return statistics.median(self.costs)

    @property
    def error_no(self) -> int:
        """AutoTVM's error number: 0 for success, else 1 + the error class's position."""
        if self.error_class is None:
            return 0
        return 1 + (ERROR_CLASSES.index(self.error_class) if self.error_class in ERROR_CLASSES
                    else len(ERROR_CLASSES))

    def as_runner_result(self) -> RunnerResult:
        return RunnerResult(self.costs, self.error_class, self.error_msg, self.aborted_early)


def to_record(inp: MeasureInput, res: MeasureResult, measure: dict | None = None) -> TuningRecord:
    """The record of a measured config: the engine's (`res.record`), or for a result of a
    measure function one made here (its schedule's trace; the knobs alone if the config does
    not apply)."""
    if res.record is not None:
        return res.record
    task = inp.task
    return TuningRecord(workload=task.workload, trace=inp.trace,
                        run_secs=res.costs if res.ok else None, target=task.target,
                        args_info=args_info(task.func), measure=dict(measure or {}),
                        error_class=res.error_class, error_msg=res.error_msg,
                        time=res.timestamp, sch_hash=None if inp.refused else inp.sch_hash)


# ---------------------------------------------------------------------------- the parts
class LocalBuilder(_LocalBuilder):
    """AutoTVM's LocalBuilder: `n_parallel` compiles at a time, `timeout` seconds each."""

    def __init__(self, *, timeout: float = 30.0, n_parallel: int | None = None):
        super().__init__(max_workers=n_parallel, timeout_s=timeout)


class LocalRunner(_LocalRunner):
    """AutoTVM's LocalRunner: each of `repeat` measurements times `number` calls (more if
    one measurement would last less than `min_repeat_ms`), `timeout` seconds per candidate,
    on `num_threads` threads (1 by default: compare single-threaded)."""

    def __init__(self, *, number: int = 4, repeat: int = 3, timeout: float = 10.0,
                 min_repeat_ms: float = EvaluatorConfig.min_repeat_ms,
                 enable_cpu_cache_flush: bool = False, num_threads: int | None = 1):
        super().__init__(timeout_s=timeout)
        self.settings = EvaluatorConfig(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms,
                                        enable_cpu_cache_flush=enable_cpu_cache_flush,
                                        num_threads=num_threads)


class MeasureOption:
    """How configs are measured: a Builder, a Runner and the evaluator settings (stored
    with every record), which the task scheduler uses for a tuner's run. `n_parallel`
    configs are measured per batch (default: the builder's parallel compiles, at least 2);
    `check_correctness` and `abort_ratio` are the scheduler's."""

    def __init__(self, builder="local", runner="local", *, evaluator: EvaluatorConfig | None = None,
                 n_parallel: int | None = None, check_correctness: bool = True,
                 abort_ratio: float = 3.0):
        self.builder = Builder.create(builder)
        self.runner = Runner.create(runner)
        fixed = self.runner.evaluator  # a runner answering from a table fixes its settings
        if fixed is not None and evaluator is not None and evaluator != fixed:
            raise TuneError(f"the runner's results are measured with {fixed} (its table's "
                            f"settings), not {evaluator}: leave evaluator= unset")
        self.evaluator = (fixed or evaluator or getattr(self.runner, "settings", None)
                          or EvaluatorConfig(num_threads=1))
        if not isinstance(self.evaluator, EvaluatorConfig):
            raise TuneError(f"evaluator must be an EvaluatorConfig, got {self.evaluator!r}")
        self.n_parallel = n_parallel or max(2, getattr(self.builder, "max_workers", 0)
                                            or os.cpu_count() or 2)
        self.check_correctness = check_correctness
        self.abort_ratio = abort_ratio

    def close(self) -> None:
        self.runner.close()


def measure_option(builder="local", runner="local", **kwargs) -> MeasureOption:
    """AutoTVM's measure_option: `builder` and `runner` are names ("local") or instances
    (autotvm.LocalRunner(number=, repeat=, timeout=), a SimulatedRunner, ...); the keyword
    arguments are MeasureOption's."""
    return MeasureOption(builder, runner, **kwargs)
