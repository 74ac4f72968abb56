"""Task schedulers: share the tuning budget across tasks."""
from .base import TaskScheduler, TaskState
from .round_robin import RoundRobin

__all__ = ["RoundRobin", "TaskScheduler", "TaskState"]
