"""Search strategies: which candidates to measure next."""
from .base import MeasureCandidate, SearchStrategy
from .replay_trace import ReplayTrace

__all__ = ["MeasureCandidate", "ReplayTrace", "SearchStrategy"]
