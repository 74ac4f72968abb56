"""Template-based tuning in the AutoTVM style: a schedule function with knobs
(`define_split`, `define_knob`, `define_reorder`, `define_annotate`), its ConfigSpace, and
classic tuners over it. A config applied is an ordinary schedule whose trace holds the knobs
as `sample_knob` instructions, so its records live in the same databases as any other.
`from looptune import autotvm` gives AutoTVM's names for all of it."""
from . import callback, task, tuner
from .callback import log_to_file, progress_bar
from .dispatch import ApplyHistoryBest, apply_history_best
from .error import TemplateError, TemplateWarning
from .measure import (LocalBuilder, LocalRunner, MeasureInput, MeasureOption, MeasureResult,
                      measure_option)
from .space import ConfigEntity, ConfigSpace, FallbackConfigEntity, config_of_trace
from .task import TEMPLATES, Template, TemplateTask, create, get_config, template

__all__ = ["ApplyHistoryBest", "ConfigEntity", "ConfigSpace", "FallbackConfigEntity",
           "LocalBuilder", "LocalRunner", "MeasureInput", "MeasureOption", "MeasureResult",
           "TEMPLATES", "Template", "TemplateError", "TemplateTask", "TemplateWarning",
           "apply_history_best", "callback", "config_of_trace", "create", "get_config",
           "log_to_file", "measure_option", "progress_bar", "task", "template", "tuner"]
