"""AutoTVM's names for looptune's template-based tuning (looptune.template), so that a
tuning script written for AutoTVM reads the same with looptune's schedule primitives:

    @autotvm.template("matmul")            autotvm.task.create(name, args, target)
    autotvm.get_config()                   autotvm.tuner.XGBTuner(task).tune(...)
    autotvm.measure_option(builder="local", runner=autotvm.LocalRunner(number=5))
    autotvm.callback.progress_bar(n)       autotvm.callback.log_to_file(path)
    with autotvm.apply_history_best(path): sch, args = template_fn(...)
"""
from .template import (ApplyHistoryBest, ConfigEntity, ConfigSpace, FallbackConfigEntity,
                       LocalBuilder, LocalRunner, MeasureInput, MeasureOption, MeasureResult,
                       TemplateError, TemplateWarning, apply_history_best, callback, get_config,
                       measure_option, task, template, tuner)

__all__ = ["ApplyHistoryBest", "ConfigEntity", "ConfigSpace", "FallbackConfigEntity",
           "LocalBuilder", "LocalRunner", "MeasureInput", "MeasureOption", "MeasureResult",
           "TemplateError", "TemplateWarning", "apply_history_best", "callback", "get_config",
           "measure_option", "task", "template", "tuner"]
