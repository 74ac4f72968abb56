"""compile_model: a graph -> an executable model. The planner (planner.py) schedules and
compiles every kernel and lays out memory the same way for every target; the target kind's
model code turns the plan into something callable: a CompiledModel (model_c.py: one shared
library, one native call per inference) on a CPU, a CudaModel (model_cuda.py) on a GPU."""
from __future__ import annotations

import json

from ..target import Target
from ..tune.database.base import Database
from .ir import Graph
from .planner import plan_model


def _build_cpu(plan, num_threads):
    from .model_c import build_cpu_model
    return build_cpu_model(plan, num_threads=num_threads)


def _build_cuda(plan, num_threads):
    from .model_cuda import build_cuda_model
    return build_cuda_model(plan)


# target kind -> the model code that makes a plan callable
MODEL_BUILDERS = {"cpu": _build_cpu, "cuda": _build_cuda}


def compile_model(graph: Graph, database: Database | None = None, target="cpu", *,
                  num_threads: int | None = None, check: bool = True,
                  precision: str = "float32", calibration=None):
    """Compile `graph` into a CompiledModel: `compiled(*numpy_inputs)` returns its outputs.
    Tasks with a record in `database` (a Database, or a work dir's path) use their best
    verified one, the others a rule-based default schedule. `num_threads`: the threads every
    kernel uses (default: the records', else all cores). On a cuda target the result is a
    CudaModel (model_cuda.py), which needs an NVIDIA GPU.

    `precision` "bf16": matmuls with constant weights in bfloat16, summed in float32; "int8":
    matmuls and convolutions with constant weights in int8, activation ranges calibrated on
    `calibration`; "int8-dynamic": matmuls with constant weights in int8, activation ranges
    computed per call (graph/precision.py, graph/quantize.py). A lower precision is never
    silent: with `calibration` (a list of input tuples) the compiled model runs them, its
    outputs are compared with the float32 graph's, and the report is printed and kept as
    `compiled.accuracy`."""
    if not isinstance(graph, Graph):
        raise TypeError(f"compile_model needs a looptune Graph, got {type(graph).__name__}")
    target = Target.create(target)
    if database is not None and not isinstance(database, Database):
        from ..tune.database.work_dir import open_work_dir
        database = open_work_dir(database)  # a mistyped path is an error, not "untuned"
    from .precision import calibration_sets, lower_precision
    calibration = calibration_sets(graph, calibration)
    model = lower_precision(graph, precision, calibration=calibration or None)
    plan = plan_model(model, database, target, check=check, num_threads=num_threads)
    compiled = MODEL_BUILDERS[target.kind](plan, num_threads)
    compiled.precision = precision
    compiled.accuracy = None
    if precision != "float32" and calibration:
        from .evaluate import evaluate
        from .precision import accuracy, report
        reference = [evaluate(graph, *inputs) for inputs in calibration]
        got = [compiled(*inputs) for inputs in calibration]
        got = [g if isinstance(g, (list, tuple)) else [g] for g in got]
        compiled.accuracy = accuracy(reference, got)
        print(report(precision, compiled.accuracy, len(calibration)))
    return compiled


def describe(desc: dict) -> str:
    return json.dumps(desc, indent=2)
