"""Runners: built kernels -> checked, measured run times, in isolated worker processes (or,
simulated, from a table of measurements already made)."""
from .base import EvaluatorConfig, Runner, RunnerInput, RunnerResult
from .local import LocalRunner
from .simulated import SimulatedRunner, simulate

__all__ = ["EvaluatorConfig", "LocalRunner", "Runner", "RunnerInput", "RunnerResult",
           "SimulatedRunner", "simulate"]
