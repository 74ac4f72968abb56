"""AutoTVM's tuners over the tuning engine. A Tuner binds a template task to one of the
engine's template search strategies (template/search_strategy) in a TuneContext; `tune`
has the task scheduler drive it - tune's builder and runner measure every config (reference
check, identical binaries measured once, early abort, classified failures) and every record
goes into `tuner.database` and, through `callback.log_to_file`, any other database. Given a
plain function `measure(inputs) -> results` instead (a fake timer, a cost formula), the
strategy's batches are measured by that function.

No config is measured twice, across `tune` calls too. The search's state (`history`,
`best_config`, `best_flops`, `visited`, and the strategy's own: `train_ct`, `plan`, ...)
reads through the tuner."""
from __future__ import annotations

import numbers
import random

from ...registry import Registry
from ...tune.context import TuneContext
from ...tune.database.memory import MemoryDatabase
from ...tune.error import TuneError
from ...tune.search_strategy.base import SearchStrategy
from ...tune.task_scheduler.base import TaskScheduler
from ..error import TemplateError
from ..measure import MeasureOption, MeasureResult
from ..space_generator import TemplateSpace
from ..task import TemplateTask

DEFAULT_BATCH = 8  # configs per batch for a measure function (a MeasureOption has n_parallel)


class Tuner:
    """AutoTVM's tuner interface over the engine: `Tuner(task)` (or `Tuner.create("xgb",
    task)`), then `tune(n_trial, measure_option)`, which returns the best config. A subclass
    names its search strategy in `strategy_name`; the strategy's state reads through the tuner."""

    registry = Registry("tuner", error=TuneError)
    strategy_name = "template-random"  # the SearchStrategy this tuner runs

    def __init__(self, task: TemplateTask, *, seed: int | None = None, **options):
        """`options` are the strategy's (GATuner: pop_size, ...; XGBTuner: plan_size, ...)."""
        if not isinstance(task, TemplateTask):
            raise TemplateError(f"a tuner tunes a template task (autotvm.task.create(name, args, "
                                f"target)), got {task!r}")
        self.task = task
        self.space = task.config_space
        self.seed = seed if seed is not None else random.SystemRandom().randrange(1 << 31)
        self.strategy = SearchStrategy.create(self.strategy_name, **options)
        self.context = TuneContext(task.func, task.target, TemplateSpace(task), self.strategy,
                                   task_name=task.name, seed=self.seed, flops=task.flop)
        self.database = MemoryDatabase()  # every record the engine measured for this tuner

    @classmethod
    def create(cls, spec, task, **kwargs) -> "Tuner":
        """A tuner from its registered name ("gridsearch", "random", "ga", "sa", "hill-climb",
        "xgb"), class or instance."""
        if isinstance(spec, Tuner):
            return spec
        if isinstance(spec, str):
            spec = cls.registry.lookup(spec)
        return spec(task, **kwargs)

    def __getattr__(self, name):
        """The search's state and methods (history, best_config, next_batch, ...)."""
        strategy = self.__dict__.get("strategy")
        if strategy is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(strategy, name)

    def has_next(self) -> bool:
        """Is any config of the space left unmeasured?"""
        return self.strategy.has_next()

    # ------------------------------------------------------------------ the loop
    def tune(self, n_trial: int, measure_option=None, early_stopping: int | None = None,
             callbacks=()):
        """Measure up to `n_trial` configs; returns the best config. `measure_option`: from
        autotvm.measure_option(...) (default: local builder and runner), or a function
        `measure(inputs) -> results` (MeasureInput -> MeasureResult). Each callback is called
        as `callback(tuner, inputs, results)` after every batch."""
        if isinstance(n_trial, bool) or not isinstance(n_trial, numbers.Integral) or n_trial < 1:
            raise TuneError(f"n_trial must be a whole number of trials >= 1, got {n_trial!r}")
        if measure_option is not None and not isinstance(measure_option, MeasureOption) \
                and not callable(measure_option):
            raise TuneError(f"measure_option must come from autotvm.measure_option(...) or be a "
                            f"function measure(inputs) -> results, got {measure_option!r}")
        self.strategy.early_stopping = early_stopping
        try:
            if callable(measure_option) and not isinstance(measure_option, MeasureOption):
                self._tune_with(measure_option, n_trial, callbacks)
            else:
                self._tune_on_engine(measure_option or MeasureOption(), n_trial, callbacks)
        finally:
            for cb in callbacks:
                close = getattr(cb, "close", None)
                if close is not None:
                    close()
        return self.best_config

    def _tune_on_engine(self, option: MeasureOption, n_trial: int, callbacks) -> None:
        """The task scheduler runs the strategy, measuring with the option's parts."""
        task = self.task
        before = len(self.database.records_of(task.workload, task.target))

        def report(state, candidates, results):
            inputs = candidates[:len(results)]
            results = [MeasureResult.from_runner(r, rec)
                       for r, rec in zip(results, state.batch_records)]
            best = self.strategy.best_measure_pair
            if best is not None and best[0] in inputs:  # the best with its record
                self.strategy.best_measure_pair = (best[0], results[inputs.index(best[0])])
            for cb in callbacks:
                cb(self, inputs, results)

        try:
            TaskScheduler.create("round-robin").tune(
                [self.context], max_trials_global=before + n_trial, max_trials_per_task=None,
                num_trials_per_iter=option.n_parallel, builder=option.builder,
                runner=option.runner, database=self.database, evaluator=option.evaluator,
                check_correctness=option.check_correctness, abort_ratio=option.abort_ratio,
                progress=False, measure_callbacks=[report])
        finally:
            option.close()

    def _tune_with(self, measure, n_trial: int, callbacks) -> None:
        """The strategy's batches measured by a function, nothing built."""
        search = self.strategy
        search.pre_tuning(max_trials=n_trial, num_trials_per_iter=DEFAULT_BATCH,
                          design_spaces=self.context.generate_design_space(), database=None,
                          seen=set())
        try:
            while True:
                inputs = search.generate_measure_candidates()
                if not inputs:
                    break
                results = list(measure(inputs))
                if len(results) != len(inputs):
                    raise TuneError(f"the measure function returned {len(results)} results for "
                                    f"{len(inputs)} inputs")
                search.tell(inputs, results)
                for cb in callbacks:
                    cb(self, inputs, results)
        finally:
            search.post_tuning()

    def __repr__(self):
        return (f"{type(self).__name__}({self.task.name}, {len(self.visited)} of "
                f"{len(self.space)} configs measured)")


@Tuner.registry.register("gridsearch")
class GridSearchTuner(Tuner):
    """Every config in index order (the first knob varying fastest)."""
    strategy_name = "template-gridsearch"


@Tuner.registry.register("random")
class RandomTuner(Tuner):
    """Configs drawn uniformly at random, without repeats."""
    strategy_name = "template-random"


@Tuner.registry.register("ga")
class GATuner(Tuner):
    """A genetic algorithm over the knobs: pop_size=32, elite_num=3, mutation_prob=0.1."""
    strategy_name = "template-ga"


@Tuner.registry.register("sa")
class SimulatedAnnealingTuner(Tuner):
    """Simulated annealing over neighbouring configs: temp=0.5, cooling=0.9."""
    strategy_name = "template-sa"


@Tuner.registry.register("hill-climb")
class HillClimbTuner(Tuner):
    """Hill climbing over neighbouring configs, restarting at local optima."""
    strategy_name = "template-hill-climb"


@Tuner.registry.register("xgb")
class XGBTuner(Tuner):
    """XGBoost-guided search: plan_size=64, feature_type="knob" | "schedule", cost_model,
    eps=0.05, sa_points, sa_iters, retrain_every=8, min_train=16, exhaustive_limit=50000."""
    strategy_name = "template-xgb"
