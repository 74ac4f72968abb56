"""Tune a whole model: its distinct tasks under one budget and one database."""
from __future__ import annotations

from ..tune.tune import tune_tir
from .ir import Graph, GraphError
from .tasks import extract_tasks


def select_tasks(tasks: list, op_names) -> list:
    """The tasks whose names contain one of `op_names` (all of them for None)."""
    if op_names is None:
        return list(tasks)
    op_names = [op_names] if isinstance(op_names, str) else list(op_names)
    chosen = [t for t in tasks if any(n in t.task_name for n in op_names)]
    if not chosen:
        raise GraphError(f"no task name contains {', '.join(map(repr, op_names))}; the model's "
                         f"tasks are {', '.join(t.task_name for t in tasks)}")
    return chosen


def tune_model(graph: Graph, target="cpu", work_dir=None, *, max_trials_global: int,
               op_names=None, num_trials_per_iter: int = 64, task_scheduler="gradient",
               num_threads: int | None = None, evaluator=None, precision: str = "float32",
               calibration=None, **kwargs):
    """Tune every task of `graph` (or those whose names contain one of `op_names`) with the
    gradient task scheduler, each task weighted by how often the model runs it. Records go to
    `work_dir`'s database (or `database=`); running again resumes. Returns the database.

    Each task's default schedule (looptune.dlight, what compile_model runs untuned) is timed
    first with the same settings, as a baseline record: it costs no trials, weighs each
    task's share of the model's time for the warm-up round, and compile_model applies a
    tuned record only where it beats it. A budget too small for every task to get a first
    batch says so up front (a BudgetWarning naming the tasks it covers).

    Kernels are timed in the cache state they run in (model_evaluator): `evaluator` (an
    EvaluatorConfig) overrides that, `num_threads` sets the threads of the default one.
    `precision` and `calibration`: those compile_model will be given ("bf16", "int8",
    "int8-dynamic": graph/precision.py), so that the tasks tuned are the ones it compiles."""
    if not isinstance(graph, Graph):
        raise TypeError(f"tune_model needs a looptune Graph (from_torch, from_onnx or "
                        f"GraphBuilder), got {type(graph).__name__}")
    from .precision import calibration_sets, lower_precision
    calibration = calibration_sets(graph, calibration) or None
    graph = lower_precision(graph, precision, calibration=calibration)
    tasks = select_tasks(extract_tasks(graph, target), op_names)
    funcs = {t.task_name: t.func for t in tasks}
    if evaluator is None:
        evaluator = model_evaluator(graph, target, num_threads=num_threads)
    from ..dlight import default_schedule
    kwargs.setdefault("default_schedule", default_schedule)
    return tune_tir(funcs, target, work_dir, max_trials_global=max_trials_global,
                    num_trials_per_iter=num_trials_per_iter, task_scheduler=task_scheduler,
                    task_weights=[float(t.weight) for t in tasks], evaluator=evaluator,
                    **kwargs)


def model_evaluator(graph: Graph, target="cpu", *, num_threads: int | None = None):
    """How to time the kernels of `graph` so that records add up to the model's time. When
    its weights are larger than the last-level cache, each layer finds its weights in memory,
    not in cache (ResNet-18's 47 MB: the tuned convolutions' records summed to 16.3 ms, the
    model ran in 19.5 ms, and the same kernels timed cold summed to 20.1 ms): caches are then
    flushed before every call. Smaller models keep their weights cached from one inference to
    the next and are timed warm. A model's runner calls its kernels from C, so they are timed
    in a C loop (calls_from="c"), not through Python's call path."""
    from ..target import Target
    from ..tune import EvaluatorConfig
    target = Target.create(target)
    weights = sum(v.data.nbytes for v in graph.constants)
    if target.l3_bytes and weights > target.l3_bytes:
        return EvaluatorConfig(number=1, repeat=10, min_repeat_ms=0.0,
                               enable_cpu_cache_flush=True, num_threads=num_threads,
                               calls_from="c")
    return EvaluatorConfig(num_threads=num_threads, calls_from="c")


def untuned_tasks(graph: Graph, database, target="cpu") -> list:
    """The tasks of `graph` that `database` has no successful tuned record for on `target`
    (a baseline, the default schedule's time, does not count): what tuning this model would
    still have to do (a database tuned on a related model - ResNet-18 for ResNet-34 - already
    serves their shared tasks)."""
    from ..target import Target
    target = Target.create(target)
    out = []
    for t in extract_tasks(graph, target):
        if not database.has_workload(t.func) or not any(
                r.ok and not r.baseline for r in database.records_like(t.func, target)):
            out.append(t)
    return out
