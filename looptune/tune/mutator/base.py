"""Mutators propose a new decision for one sampling instruction of a design-space point;
they never change its instructions. `apply(point, rand)` returns (position, decision), or
None when the point has nothing this mutator can change."""
from __future__ import annotations

from ..registry import Registry


class Mutator:
    registry = Registry("mutator")
    tag = ""  # the kind of sampling instruction it changes (see search_strategy.space)

    @classmethod
    def create(cls, spec, **kwargs) -> "Mutator":
        return cls.registry.create(spec, Mutator, **kwargs)

    def initialize_with_tune_context(self, context) -> None:
        pass

    def positions(self, point) -> list:
        """The sampling instructions of `point` this mutator can change."""
        return [p for p, t in point.space.tags.items() if t == self.tag]

    def apply(self, point, rand):
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
