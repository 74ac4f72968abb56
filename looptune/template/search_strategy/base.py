"""TemplateSearch: the classic tuners as search strategies of the engine. A subclass proposes
configs (`next_batch`) and learns from their measurements (`update`); this base turns them
into measure candidates for the task scheduler (or a tuner's measure function), never
proposes a config twice (across runs too), keeps the history and the best config, and
stops at its budget, when the space is exhausted, or `early_stopping` trials after the
best."""
from __future__ import annotations

import math
import random

from ...tune.search_strategy.base import SearchStrategy
from ..error import TemplateError
from ..measure import MeasureResult
from ..space import ConfigEntity


class TemplateSearch(SearchStrategy):
    """State kept across runs: `visited` (config indices measured or being measured),
    `history` ((config index, median seconds; inf: failed) in measurement order),
    `best_config`, `best_secs`, `best_flops`, `best_measure_pair`, `best_iter` (the trial that
    found it). `early_stopping`: stop a run that many trials after the best (None: never)."""

    def __init__(self, *, early_stopping: int | None = None):
        self.early_stopping = early_stopping
        self.context = None

    @classmethod
    def names(cls) -> list:
        """The registered names of the template strategies."""
        return [n for n, c in SearchStrategy.registry.items()
                if isinstance(c, type) and issubclass(c, cls)]

    def initialize_with_tune_context(self, context) -> None:
        from ..space_generator import TemplateSpace
        if not isinstance(context.space_generator, TemplateSpace):
            raise TemplateError(f"{type(self).__name__} searches a template's configs: give its "
                                "TuneContext the template's design space (task.tune_context(), "
                                "or space_generator=TemplateSpace(task))")
        super().initialize_with_tune_context(context)
        self.design = context.space_generator
        self.task = self.design.task
        self.space = self.task.config_space
        self.seed = context.seed
        self.rand = random.Random(self.seed)
        self.visited: set = set()
        self.history: list = []
        self.best_config: ConfigEntity | None = None
        self.best_secs = math.inf
        self.best_flops = 0.0
        self.best_measure_pair = None  # (MeasureInput, MeasureResult)
        self.best_iter = 0
        self.max_trials = self.per_iter = self.proposed = self.noted = 0
        self.setup()

    def setup(self) -> None:
        """A subclass's own state, once the space is known."""

    # ------------------------------------------------------------------ what subclasses do
    def next_batch(self, n: int) -> list:
        """Up to n configs (ConfigEntity or indices) to measure next, none measured before."""
        raise NotImplementedError

    def update(self, inputs: list, results: list) -> None:
        """Learn from measured configs (MeasureInput, MeasureResult pairs)."""

    # ------------------------------------------------------------------ the engine's interface
    def pre_tuning(self, *, max_trials, num_trials_per_iter, design_spaces, database, seen):
        """A run of up to max_trials configs. Configs the database measured before (a resumed
        run) are not proposed again, and the search learns from them."""
        self.max_trials = max_trials
        self.per_iter = num_trials_per_iter
        self.proposed = self.noted = 0  # this run's
        if database is not None:
            self._learn_from_database(database)

    def generate_measure_candidates(self, n: int | None = None):
        n = min(n or self.per_iter, self.max_trials - self.proposed)
        if n <= 0 or not self.has_next() or self._stopped_early():
            return None
        configs = self._fresh(self.next_batch(n))
        if not configs:
            return None
        self.proposed += len(configs)
        return [self.make_candidate(c) for c in configs]

    def notify_runner_results(self, candidates, results) -> None:
        for c in candidates[len(results):]:  # not measured (the run's budget ran out)
            self.visited.discard(c.config.index)
            self.proposed -= 1
        self.tell(candidates[:len(results)], [MeasureResult.from_runner(r) for r in results])

    def tell(self, inputs: list, results: list) -> None:
        """Measured configs (MeasureInput, MeasureResult pairs): note them, then learn."""
        for inp, res in zip(inputs, results):
            self._note(inp, res)
        self.noted += len(results)
        self.update(inputs, results)

    def make_candidate(self, config):
        """The MeasureInput of a config: the template run with its decisions, when needed."""
        return self.design.candidate(config)

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    # ------------------------------------------------------------------ helpers
    def _stopped_early(self) -> bool:
        """`early_stopping` trials measured after the best, in a run that measured some."""
        return (self.early_stopping is not None and self.noted > 0
                and len(self.history) - 1 - self.best_iter >= self.early_stopping)

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

    def _learn_from_database(self, database) -> None:
        inputs, results = [], []
        for rec in database.records_of(database.key_of(self.context.func), self.context.target):
            cfg = self.design.config_of(rec.trace)
            if cfg is None or cfg.index in self.visited:
                continue
            self.visited.add(cfg.index)
            inputs.append(self.design.candidate(cfg))
            results.append(MeasureResult(rec.run_secs if rec.ok else None, rec.error_class,
                                         rec.error_msg, bool(rec.measure.get("aborted_early")),
                                         rec, rec.time))
        if inputs:
            for inp, res in zip(inputs, results):
                self._note(inp, res)
            self.update(inputs, results)

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
        if self.context is None:
            return f"{type(self).__name__}()"
        return (f"{type(self).__name__}({self.task.name}, {len(self.visited)} of "
                f"{len(self.space)} configs measured)")
