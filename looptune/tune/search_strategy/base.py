"""Search strategies propose the candidates to measure, batch by batch, and learn from the
results. The task scheduler drives them: pre_tuning, then generate_measure_candidates /
notify_runner_results until the strategy returns None, then post_tuning."""
from __future__ import annotations

from dataclasses import dataclass

from ...backend import Backend
from ...schedule import Schedule
from ...tir.func import PrimFunc
from ..registry import Registry


@dataclass(eq=False)
class MeasureCandidate:
    """One schedule the search asks to measure, with the hash that keeps it from being measured
    twice."""

    sch: Schedule      # the finished (postprocessed) schedule
    sch_hash: str      # structural hash of sch.func, for de-duplication

    # why this candidate has no schedule (a template refused its config), or None. The task
    # scheduler builds nothing for it and records a schedule_error with `trace`.
    refused = None

    @property
    def trace(self):
        """What the candidate's record stores."""
        return self.sch.trace

    def lowered(self, target) -> PrimFunc:
        """Stage-1 lowering of the schedule by the target's Backend, computed once per
        schedule state and shared by verification, feature extraction and the builder."""
        return Backend.for_target(target).lower_loops(self.sch)


class SearchStrategy:
    """The interface of a search strategy: `pre_tuning`, `generate_measure_candidates`,
    `notify_runner_results`, `post_tuning`, called in that order by the task scheduler for one
    task; register with `@SearchStrategy.registry.register("name")`."""

    registry = Registry("search strategy")

    @classmethod
    def create(cls, spec="replay-trace", **kwargs) -> "SearchStrategy":
        """A strategy from its registered name ("evolutionary", "replay-trace", ...), class or
        instance."""
        return cls.registry.create(spec, SearchStrategy, **kwargs)

    def initialize_with_tune_context(self, context) -> None:
        """Keep the task (`self.context`: its function, target, postprocessors and seed); a
        subclass that overrides this calls it."""
        self.context = context

    def pre_tuning(self, *, max_trials: int, num_trials_per_iter: int, design_spaces: list,
                   database, seen: set) -> None:
        """`seen`: structural hashes of schedules already measured (from the database)."""
        raise NotImplementedError

    # why generate_measure_candidates last returned nothing, said to the user when a task
    # stops before the run's budget is spent
    stop_reason: str | None = None

    def generate_measure_candidates(self, n: int | None = None) -> list | None:
        """Up to `n` candidates to measure next (None: num_trials_per_iter; the task
        scheduler sizes a task's warm-up batch this way), or None when the search is done
        (then `stop_reason` says why, where the strategy knows)."""
        raise NotImplementedError

    def notify_runner_results(self, candidates: list, results: list) -> None:
        """Learn from a batch just measured: `results` (RunnerResult) for the first len(results)
        of `candidates`; the rest were not measured (the run's budget ran out). The default
        learns nothing."""
        pass

    def post_tuning(self) -> None:
        """The run is over (also after an error): release what pre_tuning set up."""
        pass

    # ------------------------------------------------------------------ transfer between tasks
    def signature(self):
        """A hashable description of this task's design space such that another task with
        the same signature can try this task's decisions (e.g. the same convolution with a
        different fused epilogue); None: this strategy takes no offers."""
        return None

    def offer(self, trace) -> None:
        """Another task with the same signature found a new best schedule (`trace`)."""
