"""Runners: built kernels -> checked, measured run times, in isolated worker processes (CPU:
"local", GPU: "cuda", a Ray cluster's devices: "ray"), or, simulated, from a table of
measurements already made."""
from .base import EvaluatorConfig, Runner, RunnerInput, RunnerResult
from .cuda import CudaRunner
from .local import LocalRunner
from .ray import RayRunner  # Ray itself is imported when it first runs
from .simulated import SimulatedRunner, simulate

__all__ = ["CudaRunner", "EvaluatorConfig", "LocalRunner", "RayRunner", "Runner", "RunnerInput",
           "RunnerResult", "SimulatedRunner", "simulate"]
