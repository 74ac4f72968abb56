"""Template-based tuning in the AutoTVM style: a schedule function with knobs
(`define_split`, `define_knob`, `define_reorder`, `define_annotate`), its ConfigSpace, and
classic tuners over it, all on the one tuning engine: a task's ConfigSpace is a design space
of `sample_knob` instructions (TemplateSpace, space generator "template"), the tuners are
search strategies ("template-xgb", ...), the task scheduler measures configs with tune's
builder and runner, and the records live in the same databases as any other.
`from looptune import autotvm` gives AutoTVM's names for all of it."""
from . import callback, search_strategy, task, tuner
from .callback import log_to_file, progress_bar
from .dispatch import ApplyHistoryBest, apply_history_best
from .error import TemplateError, TemplateWarning
from .measure import (LocalBuilder, LocalRunner, MeasureInput, MeasureOption, MeasureResult,
                      measure_option)
from .space import ConfigEntity, ConfigSpace, FallbackConfigEntity, config_of_trace
from .space_generator import TemplateSpace
from .task import TEMPLATES, Template, TemplateTask, create, get_config, template

__all__ = ["ApplyHistoryBest", "ConfigEntity", "ConfigSpace", "FallbackConfigEntity",
           "LocalBuilder", "LocalRunner", "MeasureInput", "MeasureOption", "MeasureResult",
           "TEMPLATES", "Template", "TemplateError", "TemplateSpace", "TemplateTask",
           "TemplateWarning", "apply_history_best", "callback", "config_of_trace", "create",
           "get_config", "log_to_file", "measure_option", "progress_bar", "search_strategy",
           "task", "template", "tuner"]
