"""TemplateSpace: a template task's ConfigSpace as the engine's design space, so a template
task is an ordinary TuneContext (`task.tune_context(strategy)`).

The design space is the knobs as sampling instructions: one `sample_knob` per knob, in
definition order, its decision an index into the knob's values. A point of it (one decision
per knob) is a config. What follows the knobs cannot be one fixed trace: a template is a
Python function whose later primitives may depend on knob values (`if cfg["pad_at"].val ==
"inline": sch.compute_inline(...)`), so a candidate is made by running the template with
the chosen decisions (`candidate`), and only the template strategies (template/search_strategy)
search this space: replaying one trace with new decisions, as evolutionary search does,
would skip the template's control flow.
"""
from __future__ import annotations

from ..schedule import Schedule
from ..tune.space_generator.base import SpaceGenerator
from .error import TemplateError
from .measure import MeasureInput
from .space import ConfigEntity, config_of_trace


@SpaceGenerator.registry.register("template")
class TemplateSpace(SpaceGenerator):
    """A template task's knobs as the design space ("template"): searched by the template
    strategies only, which run the template once per config."""

    def __init__(self, task=None):
        from .task import TemplateTask
        if not isinstance(task, TemplateTask):
            raise TemplateError(f"the template design space needs a template task: "
                                f"TemplateSpace(autotvm.task.create(name, args, target)), or "
                                f"task.tune_context(strategy); got {task!r}")
        super().__init__(sch_rules=(), postprocs=())  # the template is the whole schedule
        self.task = task

    @property
    def config_space(self):
        return self.task.config_space

    def initialize_with_tune_context(self, context) -> None:
        super().initialize_with_tune_context(context)
        from .search_strategy.base import TemplateSearch
        if context.func is not self.task.func and \
                context.func.structural_hash() != self.task.workload.key:
            raise TemplateError(f"{context.task_name}: the context's function is not the "
                                f"workload of {self.task.name}")
        if not isinstance(context.search_strategy, TemplateSearch):
            raise TemplateError(
                f"{self.task.name}: a template's design space is searched by the template "
                f"strategies ({', '.join(TemplateSearch.names())}), not "
                f"{type(context.search_strategy).__name__}: the template's primitives after the "
                "knobs may depend on knob values, so it is run per config, not replayed")

    def generate_design_space(self, func, seed: int) -> list:
        """One schedule of `func` whose trace is the knobs as sample_knob instructions, with
        the fallback config's decisions."""
        sch = Schedule(func, seed=seed)
        fallback = self.task.fallback_config()
        for name, knob in self.config_space.space_map.items():
            sch.sample_knob(name, knob.candidates, decision=fallback._sub[name])
        return [sch]

    def config_of(self, trace) -> ConfigEntity | None:
        """The config whose decisions a trace's sample_knob instructions hold (a design-space
        trace, or a record of this template), or None."""
        return config_of_trace(self.config_space, trace)

    def candidate(self, config) -> MeasureInput:
        """The measure candidate of a config (a ConfigEntity or its index): the template run
        with its decisions, when first needed."""
        if not isinstance(config, ConfigEntity):
            config = self.config_space.get(config)
        return MeasureInput(self.task, config)
