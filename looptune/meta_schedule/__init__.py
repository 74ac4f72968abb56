"""MetaSchedule's names (TVM's meta_schedule) for looptune's tuning engine (looptune.tune),
so that a MetaSchedule script runs with `import looptune as tvm; from looptune import
meta_schedule as ms`:

    ms.tune_tir(mod=, target=, work_dir=, max_trials_global=, num_trials_per_iter=)
    ms.database.JSONDatabase(path_workload=, path_tuning_record=) | (work_dir=)
    database.commit_workload(mod); database.get_top_k(workload, top_k=1)[0].as_schedule()
    ms.compile_tir(database, mod, target)   ms.schedule_rule.MultiLevelTiling(structure=...)

The sub-packages are the engine's own (database, mutator, postproc, cost_model, ...), except
schedule_rule, whose constructors take MetaSchedule's keywords. Graph-level integration
(relay_integration, relax_integration) is looptune's model API instead: see
docs/tvm_names.md.
"""
from ..tune import (EvolutionarySearch, PostOrderApply, ReplayTrace, ScheduleFn, TuneContext,
                    builder, cost_model, database, mutator, postproc, runner, search_strategy,
                    space_generator, task_scheduler)
from . import schedule_rule, tir_integration
from .tir_integration import compile_tir, tune_tir

__all__ = ["EvolutionarySearch", "PostOrderApply", "ReplayTrace", "ScheduleFn", "TuneContext",
           "builder", "compile_tir", "cost_model", "database", "mutator", "postproc", "runner",
           "schedule_rule", "search_strategy", "space_generator", "task_scheduler",
           "tir_integration", "tune_tir"]

_MODEL_LEVEL = ("relay_integration", "relax_integration")


def __getattr__(name):
    if name in _MODEL_LEVEL:
        raise AttributeError(
            f"looptune.meta_schedule has no {name}: looptune tunes models from PyTorch or ONNX "
            "(looptune.from_torch / from_onnx, then tune_model and compile_model, or the "
            "`looptune tune model.onnx` command); see docs/tvm_names.md")
    raise AttributeError(f"module 'looptune.meta_schedule' has no attribute {name!r}")
