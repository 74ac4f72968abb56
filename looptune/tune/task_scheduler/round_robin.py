"""RoundRobin: tasks take turns, one batch each, skipping finished ones."""
from __future__ import annotations

from .base import TaskScheduler


@TaskScheduler.registry.register("round-robin")
class RoundRobin(TaskScheduler):
    def __init__(self):
        self.cursor = -1

    def next_task_id(self) -> int:
        n = len(self.tasks)
        for _ in range(n):
            self.cursor = (self.cursor + 1) % n
            if not self.tasks[self.cursor].done:
                return self.cursor
        return -1
