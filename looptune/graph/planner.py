"""The model planner, shared by every target: a graph -> its kernels (each task's best
verified record, else the zero-search default of looptune.dlight, compiled once through the
target's Backend), the static memory plan, and the model's description. The per-target model
code (model_c.py, model_cuda.py) turns a ModelPlan into something callable."""
from __future__ import annotations

import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..backend import Artifact, Backend
from ..dlight import default_schedule
from ..target import Target
from ..tir.func import PrimFunc
from ..tune.database.base import Database, TuningRecord
from . import kernel_cache
from .fuse import fuse
from .ir import Graph
from .memory import MemoryPlan, plan_memory
from .simplify import prepare
from .tasks import ExtractedTask, tasks_of_groups


@dataclass(eq=False)
class Kernel:
    """One task of a model, compiled: its scheduled function (named after the task), the
    artifact, and the record it was scheduled with (None: the default schedule)."""

    task: ExtractedTask
    func: PrimFunc
    artifact: Artifact
    record: TuningRecord | None = None
    module: object = field(default=None, repr=False)  # loaded already (a verified record's)

    @property
    def symbol(self) -> str:
        return self.artifact.symbol


@dataclass(eq=False)
class ModelPlan:
    """Everything a model's code needs: the prepared graph, its fused groups in run order,
    a Kernel per task (`of(group)` finds a group's), the memory plan and the description."""

    graph: Graph
    groups: list
    kernels: list
    memory: MemoryPlan
    target: Target
    backend: Backend
    desc: dict

    def of(self, group) -> Kernel:
        return self._by_group[id(group)]

    def __post_init__(self):
        self._by_group = {id(g): k for k in self.kernels for g in k.task.groups}


def plan_model(graph: Graph, database: Database | None, target: Target, *,
               check: bool = True, num_threads: int | None = None) -> ModelPlan:
    """Schedule and compile every task of `graph` for `target`, and lay out its memory."""
    graph = prepare(graph)
    groups = fuse(graph)
    tasks = tasks_of_groups(groups)
    backend = Backend.for_target(target)
    kernels, defaults = {}, []
    # the untuned kernels compile side by side (each compile is its own process), each as
    # soon as it is rendered; one cached from an earlier run is read back (kernel_cache.py)
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        for task in tasks:
            mod = tuned_kernel(task, database, target, check=check, num_threads=num_threads)
            if mod is not None:
                kernels[id(task)] = Kernel(task, mod.schedule.func, mod.artifact, mod.record,
                                           mod)
            elif target.kind == "cpu" and (hit := kernel_cache.load(task, target)) is not None:
                kernels[id(task)] = Kernel(task, *hit)
            else:
                source = backend.generate(default_schedule(task.func, target),
                                          name=task.task_name)
                defaults.append((task, source, pool.submit(backend.compile, source)))
    for task, source, artifact in defaults:
        kernels[id(task)] = Kernel(task, source.func, artifact.result())
        if target.kind == "cpu":
            kernel_cache.store(task, target, source.func, kernels[id(task)].artifact)
    ordered = [kernels[id(t)] for t in tasks]
    by_group = {id(g): k.func for k in ordered for g in k.task.groups}
    memory = plan_memory(graph, groups, by_group)
    plan = ModelPlan(graph, groups, ordered, memory, target, backend, {})
    plan.desc = describe(plan)
    return plan


def tuned_kernel(task: ExtractedTask, database: Database | None, target: Target, *,
                 check: bool, num_threads):
    """The task's kernel built with its best record that replays and verifies (a module
    with `record`, `schedule` and `artifact`), or None: untuned, or no record usable here
    (which a warning says)."""
    if database is None or not database.has_workload(task.func):
        return None
    from ..tune.tune import NoTuningRecordError, compile_tir
    try:
        return compile_tir(database, task.func, target, check=check, num_threads=num_threads,
                           name=task.task_name)
    except NoTuningRecordError as e:  # tuned, but nothing usable here: say so
        warnings.warn(f"{task.task_name}: {e}; it runs with the default schedule", stacklevel=4)
        return None


def describe(plan: ModelPlan) -> dict:
    """The JSON-ready description of a model: interface, kernels, memory, and per task
    whether it runs a tuned record."""
    graph, memory = plan.graph, plan.memory
    return {
        "name": graph.name, "target": plan.target.key(),
        "inputs": [{"name": v.name, "shape": list(v.shape), "dtype": v.dtype}
                   for v in graph.inputs],
        "outputs": [{"name": v.name, "shape": list(v.shape), "dtype": v.dtype}
                    for v in graph.outputs],
        "kernels": len(plan.groups),
        "steps": [{"kernel": plan.of(g).symbol, "output": g.output.name} for g in plan.groups],
        "arena_bytes": memory.arena_bytes, "weights_bytes": len(memory.blob),
        "tasks": [{"task_name": k.task.task_name, "weight": k.task.weight,
                   "workload": k.task.key, "tuned": k.record is not None,
                   "record_ms": None if k.record is None else k.record.median_secs * 1e3}
                  for k in plan.kernels],
    }
