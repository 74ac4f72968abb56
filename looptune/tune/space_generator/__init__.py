"""Space generators: a workload's design space."""
from .base import SpaceGenerator
from .post_order_apply import PostOrderApply, ScheduleFn

__all__ = ["PostOrderApply", "ScheduleFn", "SpaceGenerator"]
