"""RoundRobin: tasks take turns, one batch each, skipping finished ones; a task of weight w
gets w turns for every turn of a task of weight 1 (smooth weighted round-robin)."""
from __future__ import annotations

from .base import TaskScheduler


@TaskScheduler.registry.register("round-robin")
class RoundRobin(TaskScheduler):
    """Tasks take turns in proportion to their weights: simple and predictable."""

    def __init__(self, **warmup):
        super().__init__(**warmup)
        self.credit: list | None = None

    def next_task_id(self) -> int:
        live = [i for i, t in enumerate(self.tasks) if not t.done]
        if not live:
            return -1
        if self.credit is None or len(self.credit) != len(self.tasks):
            self.credit = [0.0] * len(self.tasks)
        for i in live:
            self.credit[i] += self.tasks[i].weight
        pick = max(live, key=lambda i: (self.credit[i], -i))
        self.credit[pick] -= sum(self.tasks[i].weight for i in live)
        return pick
