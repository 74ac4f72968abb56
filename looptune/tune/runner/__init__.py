"""Runners: built kernels -> checked, measured run times, in isolated worker processes."""
from .base import EvaluatorConfig, Runner, RunnerInput, RunnerResult
from .local import LocalRunner

__all__ = ["EvaluatorConfig", "LocalRunner", "Runner", "RunnerInput", "RunnerResult"]
