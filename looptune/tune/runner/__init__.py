"""Runners: built kernels -> checked, measured run times, in isolated worker processes (CPU:
"local", GPU: "cuda"), or, simulated, from a table of measurements already made."""
from .base import EvaluatorConfig, Runner, RunnerInput, RunnerResult
from .cuda import CudaRunner
from .local import LocalRunner
from .simulated import SimulatedRunner, simulate

__all__ = ["CudaRunner", "EvaluatorConfig", "LocalRunner", "Runner", "RunnerInput", "RunnerResult",
           "SimulatedRunner", "simulate"]
