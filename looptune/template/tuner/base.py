"""Tuner: searches a template's ConfigSpace. A tuner proposes configs (`next_batch`) and
learns from their measurements (`update`); `tune` is the loop: measure a batch, keep the
best, call the callbacks, stop at `n_trial` or after `early_stopping` trials without a
better config. No config is measured twice, across `tune` calls too."""
from __future__ import annotations

import math
import numbers
import random

from ...registry import Registry
from ...tune.error import TuneError
from ..error import TemplateError
from ..measure import MeasureInput, MeasureOption
from ..space import ConfigEntity
from ..task import TemplateTask

DEFAULT_BATCH = 8  # configs per batch for a measure function (a MeasureOption has n_parallel)


class Tuner:
    registry = Registry("tuner", error=TuneError)

    def __init__(self, task: TemplateTask, *, seed: int | None = None):
        if not isinstance(task, TemplateTask):
            raise TemplateError(f"a tuner tunes a template task (autotvm.task.create(name, args, "
                                f"target)), got {task!r}")
        self.task = task
        self.space = task.config_space
        self.seed = seed if seed is not None else random.SystemRandom().randrange(1 << 31)
        self.rand = random.Random(self.seed)
        self.visited: set = set()      # config indices measured (or being measured)
        self.history: list = []        # (config index, median seconds; inf: failed)
        self.best_config: ConfigEntity | None = None
        self.best_secs = math.inf
        self.best_flops = 0.0
        self.best_measure_pair = None  # (MeasureInput, MeasureResult)
        self.best_iter = 0             # the trial (0-based, over all tune calls) that found it

    @classmethod
    def create(cls, spec, task, **kwargs) -> "Tuner":
        """A tuner from its registered name ("gridsearch", "random", "ga", "sa", "hill-climb",
        "xgb"), class or instance."""
        if isinstance(spec, Tuner):
            return spec
        if isinstance(spec, str):
            spec = cls.registry.lookup(spec)
        return spec(task, **kwargs)

    # ------------------------------------------------------------------ the interface
    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    def next_batch(self, n: int) -> list:
        """Up to n configs (ConfigEntity or indices) to measure next, none measured before."""
        raise NotImplementedError

    def update(self, inputs: list, results: list) -> None:
        """Learn from measured configs (MeasureInput, MeasureResult pairs)."""

    # ------------------------------------------------------------------ the loop
    def tune(self, n_trial: int, measure_option=None, early_stopping: int | None = None,
             callbacks=()):
        """Measure up to `n_trial` configs; returns the best config. `measure_option`: from
        autotvm.measure_option(...) (default: local builder and runner), or a function
        `measure(inputs) -> results` (MeasureInput -> MeasureResult). Each callback is called
        as `callback(tuner, inputs, results)` after every batch."""
        if isinstance(n_trial, bool) or not isinstance(n_trial, numbers.Integral) or n_trial < 1:
            raise TuneError(f"n_trial must be a whole number of trials >= 1, got {n_trial!r}")
        measure, owned = self._measurer(measure_option)
        batch = getattr(measure, "n_parallel", DEFAULT_BATCH)
        done = 0
        try:
            while done < n_trial and self.has_next():
                configs = self._fresh(self.next_batch(min(batch, n_trial - done)))
                if not configs:
                    break
                inputs = [MeasureInput(self.task, c) for c in configs]
                results = list(measure(inputs))
                if len(results) != len(inputs):
                    raise TuneError(f"the measure function returned {len(results)} results for "
                                    f"{len(inputs)} inputs")
                for inp, res in zip(inputs, results):
                    self._note(inp, res)
                done += len(results)
                self.update(inputs, results)
                for cb in callbacks:
                    cb(self, inputs, results)
                if early_stopping is not None and \
                        len(self.history) - 1 - self.best_iter >= early_stopping:
                    break
        finally:
            for cb in callbacks:
                close = getattr(cb, "close", None)
                if close is not None:
                    close()
            if owned:
                measure.close()
        return self.best_config

    def _measurer(self, option):
        if option is None:
            option = MeasureOption()
        if isinstance(option, MeasureOption):
            name = getattr(self, "registered_name", type(self).__name__)
            return option.measurer(self.task, seed=self.seed, strategy=f"template-{name}"), True
        if callable(option):
            return option, False
        raise TuneError(f"measure_option must come from autotvm.measure_option(...) or be a "
                        f"function measure(inputs) -> results, got {option!r}")

    def _fresh(self, configs) -> list:
        """The proposed configs not measured before, each once; marks them visited."""
        out = []
        for c in configs:
            if not isinstance(c, ConfigEntity):
                c = self.space.get(c)
            if c.index not in self.visited:
                self.visited.add(c.index)
                out.append(c)
        return out

    def _note(self, inp, res) -> None:
        secs = res.secs
        trial = len(self.history)
        self.history.append((inp.config.index, secs))
        if secs < self.best_secs:
            self.best_secs = secs
            self.best_config = inp.config
            self.best_flops = self.task.flop / secs
            self.best_measure_pair = (inp, res)
            self.best_iter = trial

    # ------------------------------------------------------------------ for subclasses
    def random_unvisited(self, n: int, exclude=()) -> list:
        """Up to n distinct random config indices neither measured nor in `exclude`."""
        total = len(self.space)
        taken = set(exclude)
        left = total - len(self.visited | taken)
        out: list = []
        tries = 0
        while len(out) < min(n, left) and tries < 20 * n + 100:
            tries += 1
            i = self.rand.randrange(total)
            if i not in self.visited and i not in taken:
                out.append(i)
                taken.add(i)
        if len(out) < min(n, left):  # nearly exhausted: pick from what is left
            rest = [i for i in range(total) if i not in self.visited and i not in taken]
            self.rand.shuffle(rest)
            out += rest[:n - len(out)]
        return out

    def __repr__(self):
        return (f"{type(self).__name__}({self.task.name}, {len(self.visited)} of "
                f"{len(self.space)} configs measured)")
