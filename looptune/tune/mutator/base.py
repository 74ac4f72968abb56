"""Mutators propose a new decision for one sampling instruction of a design-space point;
they never change its instructions. `apply(point, rand)` returns (position, decision), or
None when the point has nothing this mutator can change."""
from __future__ import annotations

from ..registry import Registry


class Mutator:
    """The interface of a mutator. A new one sets `tag` (the kind of sampling instruction it
    changes, see search_strategy.space.DesignSpace) or overrides `positions`, implements
    `apply`, and is registered with `@Mutator.registry.register("name")`; the evolutionary
    search picks mutators by `mutator_probs` (defaults.DEFAULT_MUTATOR_PROBS)."""

    registry = Registry("mutator")
    tag = ""  # the kind of sampling instruction it changes (see search_strategy.space)

    @classmethod
    def create(cls, spec, **kwargs) -> "Mutator":
        """A mutator from its registered name ("tile-size"), class or instance."""
        return cls.registry.create(spec, Mutator, **kwargs)

    def initialize_with_tune_context(self, context) -> None:
        """Read what the mutator needs from the task (target, ...) before the search starts; the
        default needs nothing."""
        pass

    def positions(self, point) -> list:
        """The sampling instructions of `point` this mutator can change."""
        return [p for p, t in point.space.tags.items() if t == self.tag]

    def apply(self, point, rand):
        """Propose one change to `point` (a search_strategy.space.Point): return (position,
        decision) for one of `positions(point)`, the decision different from
        `point.decisions[position]`, or None when there is nothing to change. Never modify
        `point` (it stays in the population, and its children replay from its snapshots) and
        draw every random choice from `rand` (a random.Random: the run's seed). The decision
        need not be legal: replaying it may raise ScheduleError, and the search then tries
        another mutation."""
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}()"


class MutateChoice(Mutator):
    """Picks another index for a sampling instruction whose decision is an index in
    [low, point.info[pos]): a categorical choice or a compute location."""
    low = 0

    def apply(self, point, rand):
        positions = self.positions(point)
        if not positions:
            return None
        pos = rand.choice(positions)
        new = other_index(rand, point.info[pos], point.decisions[pos], low=self.low)
        return None if new is None else (pos, new)


def other_index(rand, n: int, current: int, low: int = 0):
    """A uniformly chosen int in [low, n) other than `current`, or None if there is none."""
    choices = [i for i in range(low, n) if i != current]
    return rand.choice(choices) if choices else None
