"""Task extraction: the distinct kernels of a model, each with how often it runs."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..target import Target
from ..tir.func import PrimFunc
from ..tune.database.base import workload_key
from .fuse import fuse
from .ir import Graph


@dataclass
class ExtractedTask:
    """One distinct kernel: `weight` groups of the model compute exactly this function."""
    task_name: str
    weight: int
    func: PrimFunc
    key: str
    groups: list = field(default_factory=list, repr=False)


def extract_tasks(graph: Graph, target="cpu") -> list:
    """The model's tasks in order of first appearance. Layers that compute the same function
    (same operators, shapes and attributes, whatever their names and weights) are one task
    whose weight counts them."""
    from .simplify import prepare
    Target.create(target)  # validated now: tasks are tuned for it
    return tasks_of_groups(fuse(prepare(graph)))


def tasks_of_groups(groups: list) -> list:
    tasks: dict = {}
    names: dict = {}
    for group in groups:
        func = group.prim_func()
        key = workload_key(func)
        task = tasks.get(key)
        if task is None:
            name = group.name
            n = names.get(name, 0)
            names[name] = n + 1
            task = tasks[key] = ExtractedTask(name if n == 0 else f"{name}_{n}", 0, func, key)
        task.weight += 1
        task.groups.append(group)
    return list(tasks.values())
