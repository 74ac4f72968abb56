"""Search strategies: which candidates to measure next."""
from .base import MeasureCandidate, SearchStrategy
from .evolutionary import EvolutionarySearch
from .replay_trace import ReplayTrace

__all__ = ["EvolutionarySearch", "MeasureCandidate", "ReplayTrace", "SearchStrategy"]
