"""The rule-based default schedule of a model's untuned tasks: looptune.dlight (kept here so
`from looptune.graph.default_schedule import default_schedule` goes on working)."""
from ..dlight import default_schedule

__all__ = ["default_schedule"]
