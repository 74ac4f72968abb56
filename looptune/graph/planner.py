"""The model planner, shared by every target: a graph -> its kernels (each task's best
verified record, else the zero-search default of looptune.dlight, compiled once through the
target's Backend), the static memory plan, and the model's description. A tuned record is
never applied over a faster default schedule: tune_model times the default as a baseline
record, which ranks with the tuned ones, so the fastest of both is chosen. The per-target model
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
from ..tune.database.base import Database, TuningRecord, rank
from . import kernel_cache
from .fuse import fuse
from .ir import Graph
from .memory import MemoryPlan, check_fits, plan_memory
from .simplify import prepare
from .tasks import ExtractedTask, tasks_of_groups


@dataclass(eq=False)
class Kernel:
    """One task of a model, compiled: its scheduled function (named after the task), the
    artifact, the record it was scheduled with (a baseline record for the default schedule
    measured; None: untuned), and which schedule it runs: "tuned" (a search record),
    "default" (the default schedule, timed as a baseline record and faster than every tuned
    one: compiled like an untuned kernel, dlight being deterministic) or "untuned" (no
    record). `tuned_ms` / `default_ms`: the best times of both, measured the same way."""

    task: ExtractedTask
    func: PrimFunc
    artifact: Artifact
    record: TuningRecord | None = None
    module: object = field(default=None, repr=False)  # loaded already (a verified record's)
    choice: str = "untuned"
    tuned_ms: float | None = None
    default_ms: float | None = None

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
    if target.kind == "cpu":  # (a GPU's model lives in its own memory)
        check_fits(graph, groups)
    tasks = tasks_of_groups(groups)
    backend = Backend.for_target(target)
    kernels, defaults = {}, []
    # the default kernels compile side by side (each compile is its own process), each as
    # soon as it is rendered; one cached from an earlier run is read back (kernel_cache.py)
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        for task in tasks:
            best = best_record(task, database, target)
            mod = None
            if best is None or not best.baseline:
                mod = tuned_kernel(task, database, target, check=check, num_threads=num_threads)
            if mod is not None:
                kernels[id(task)] = Kernel(task, mod.schedule.func, mod.artifact, mod.record,
                                           mod, **_choice(mod.record, database, task, target))
                continue
            # untuned, or its default schedule measured fastest: compiled as untuned
            info = {} if best is None or not best.baseline else \
                {"record": best, **_choice(best, database, task, target)}
            hit = kernel_cache.load(task, target) if target.kind == "cpu" else None
            if hit is not None:
                kernels[id(task)] = Kernel(task, *hit, **info)
            else:
                source = backend.generate(default_schedule(task.func, target),
                                          name=task.task_name)
                defaults.append((task, source, info, pool.submit(backend.compile, source)))
    for task, source, info, artifact in defaults:
        kernels[id(task)] = Kernel(task, source.func, artifact.result(), **info)
        if target.kind == "cpu":
            kernel_cache.store(task, target, source.func, kernels[id(task)].artifact)
    ordered = [kernels[id(t)] for t in tasks]
    by_group = {id(g): k.func for k in ordered for g in k.task.groups}
    memory = plan_memory(graph, groups, by_group)
    plan = ModelPlan(graph, groups, ordered, memory, target, backend, {})
    plan.desc = describe(plan)
    return plan


def best_record(task: ExtractedTask, database: Database | None, target: Target):
    """The task's fastest successful record (a baseline included), or None."""
    if database is None or not database.has_workload(task.func):
        return None
    best = database.query_tuning_record(task.func, target)
    return best[0] if best else None


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


def _choice(record: TuningRecord, database: Database, task: ExtractedTask, target) -> dict:
    """Which schedule compile_tir chose for a task (the fastest that verifies, a baseline
    included) and the best tuned and default times measured with the same settings."""
    same = rank(database.records_like(task.func, target), 1 << 30, record.measure)
    tuned = next((r.median_secs * 1e3 for r in same if not r.baseline), None)
    default = next((r.median_secs * 1e3 for r in same if r.baseline), None)
    return {"choice": "default" if record.baseline else "tuned", "tuned_ms": tuned,
            "default_ms": default}


def describe(plan: ModelPlan) -> dict:
    """The JSON-ready description of a model: interface, kernels, memory, and per task
    which schedule it runs ("choice": tuned, default or untuned), with the best tuned and
    default times measured the same way (None: not measured)."""
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
                   "workload": k.task.key, "tuned": k.choice == "tuned", "choice": k.choice,
                   "record_ms": None if k.record is None else k.record.median_secs * 1e3,
                   "tuned_ms": k.tuned_ms, "default_ms": k.default_ms}
                  for k in plan.kernels],
    }
