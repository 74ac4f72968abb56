"""tune_tir and compile_tir with MetaSchedule's keywords, over the engine's (tune/tune.py)."""
from __future__ import annotations

from ..tir.func import PrimFunc, as_prim_func
from ..tune import tune as engine


def tune_tir(mod, target, work_dir=None, max_trials_global: int = 0, *,
             num_trials_per_iter: int = 64, max_trials_per_task: int | None = None,
             space="post-order-apply", strategy="evolutionary", database=None,
             cost_model=None, seed: int | None = None, task_name: str = "main",
             num_tuning_cores=None, **kwargs):
    """Tune `mod` (a PrimFunc, or an IRModule: each function one task) for `target` (a
    target string such as "llvm -mcpu=core-avx2", or a Target); the records go to
    `database`, by default a JSONDatabase in `work_dir` (database_workload.json and
    database_tuning_record.json, as MetaSchedule writes them). Returns the database.
    `num_tuning_cores` is accepted: builds use every core of this machine."""
    if isinstance(mod, PrimFunc):
        mod = {task_name: mod}
    if database is None:
        database = "json"
    return engine.tune_tir(dict(mod), target, work_dir, max_trials_global=max_trials_global,
                           num_trials_per_iter=num_trials_per_iter,
                           max_trials_per_task=max_trials_per_task, space=space,
                           strategy=strategy, database=database, cost_model=cost_model,
                           seed=seed, **kwargs)


def compile_tir(database, mod, target, **kwargs):
    """The compiled module of `mod`'s best record in `database`, checked against the
    unscheduled program first (engine's compile_tir; NoTuningRecordError without one)."""
    return engine.compile_tir(database, as_prim_func(mod), target, **kwargs)
