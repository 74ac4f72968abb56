"""Task schedulers: share the tuning budget across tasks."""
from .base import TaskScheduler, TaskState
from .gradient import GradientBased
from .round_robin import RoundRobin
from .warmup import WarmupPlan, plan_warmup

__all__ = ["GradientBased", "RoundRobin", "TaskScheduler", "TaskState", "WarmupPlan",
           "plan_warmup"]
