"""Templates and their tasks. `@template(name)` registers a schedule function with knobs;
`create(name, args, target)` runs it once to collect its ConfigSpace and its workload (the
unscheduled PrimFunc its Schedule was made from: the key of its records, as for any other
schedule); `task.instantiate(config)` runs it with one config.

Called directly, a template runs with the best config of its workload in the records of
the enclosing `apply_history_best`, or else with its fallback config (and a warning).
"""
from __future__ import annotations

import functools
import warnings
from contextvars import ContextVar

from ..registry import Registry
from ..schedule import Schedule, Trace
from ..target import Target
from ..te import TESchedule
from ..tir.analysis import flop_count
from ..tir.structural import structural_hash
from ..tune.database.base import Workload
from .error import TemplateError, TemplateWarning
from .space import ConfigEntity, ConfigSpace, FallbackConfigEntity

TEMPLATES = Registry("template", error=TemplateError,
                     hint=" (decorate the schedule function with @autotvm.template(name))")
_CONFIG: ContextVar = ContextVar("looptune_template_config", default=None)
_DISPATCH: ContextVar = ContextVar("looptune_template_dispatch", default=None)


def get_config():
    """The config of the template that is running: a ConfigSpace while task.create collects
    the knobs, a ConfigEntity when a config is applied."""
    cfg = _CONFIG.get()
    if cfg is None:
        raise TemplateError("autotvm.get_config() gives the config of the running template; call "
                            "it inside a function decorated with @autotvm.template(name)")
    return cfg


class Template:
    """A registered template function; calling it dispatches (see the module docstring)."""

    def __init__(self, name: str, fn):
        if not callable(fn):
            raise TemplateError(f"template {name!r} must be a function, got {fn!r}")
        self.name = name
        self.fn = fn
        functools.update_wrapper(self, fn)
        self._tasks: dict = {}

    def run(self, cfg, args: tuple, kwargs: dict):
        """(schedule, tensors) of the template run with `cfg`."""
        cfg._begin()
        token = _CONFIG.set(cfg)
        try:
            out = self.fn(*args, **kwargs)
        finally:
            _CONFIG.reset(token)
            cfg._running = False
        if isinstance(out, (tuple, list)) and len(out) == 2 and isinstance(out[0], TESchedule):
            out[0].check_args(list(out[1]))  # TVM's te.create_schedule: its Schedule is s.sch
            out = (out[0].sch, out[1])
        if not (isinstance(out, (tuple, list)) and len(out) == 2 and isinstance(out[0], Schedule)):
            raise TemplateError(f"template {self.name!r} must return (sch, args): the Schedule its "
                                f"knobs were applied to and its te tensors; got {out!r:.200}")
        cfg._finish(out[0])
        return out[0], list(out[1])

    def task(self, args=(), kwargs=None, target="cpu") -> "TemplateTask":
        target = Target.create(target)
        kwargs = dict(kwargs or {})
        try:
            key = (tuple(args), tuple(sorted(kwargs.items())), target.key())
            hash(key)
        except TypeError:  # unhashable arguments: no cache
            return TemplateTask(self, args, kwargs, target)
        task = self._tasks.get(key)
        if task is None:
            task = self._tasks[key] = TemplateTask(self, args, kwargs, target)
        return task

    def __call__(self, *args, **kwargs):
        if _CONFIG.get() is not None:  # called from a running template: part of it
            return self.fn(*args, **kwargs)
        ctx = _DISPATCH.get()
        task = self.task(args, kwargs, ctx.target if ctx is not None else "cpu")
        config, record = ctx.query(task) if ctx is not None else (None, None)
        if config is None:
            if not task.warned:
                where = f" in {ctx.describe()}" if ctx is not None else ""
                warnings.warn(f"{task.name}: no tuning record of its workload "
                              f"({task.workload.key[:12]}){where}; it runs with the fallback "
                              "config, which may be slow. Tune it (autotvm tuner with "
                              "callback.log_to_file) and call it inside "
                              "autotvm.apply_history_best(log)", TemplateWarning, stacklevel=2)
                task.warned = True
            return task.instantiate(task.fallback_config())
        sch, tensors = task.instantiate(config)
        from .dispatch import reproduces
        if record is not None and not reproduces(record, task, sch):
            warnings.warn(f"{task.name}: config #{config.index} no longer gives the schedule its "
                          "record measured (has the template changed since it was tuned?)",
                          TemplateWarning, stacklevel=2)
        return sch, tensors

    def __repr__(self):
        return f"Template({self.name!r})"


def template(name: str, func=None):
    """Decorator: register `func(*args) -> (sch, tensors)` as template `name`. Registering
    a name again replaces the template (re-running a notebook cell)."""
    if not isinstance(name, str) or not name:
        raise TemplateError(f"@autotvm.template needs a name, e.g. @autotvm.template('matmul'); "
                            f"got {name!r}")

    def deco(fn):
        tpl = Template(name, fn)
        TEMPLATES[name] = tpl
        return tpl
    return deco(func) if func is not None else deco


class TemplateTask:
    """A template with concrete arguments, for one target: its `config_space`, its workload
    (`func`, `workload`), `flop`, and `instantiate(config)`."""

    def __init__(self, tpl: Template, args, kwargs, target):
        self.template = tpl
        self.args = tuple(args)
        self.kwargs = dict(kwargs)
        self.target = Target.create(target)
        shown = ", ".join([repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()])
        self.name = f"{tpl.name}({shown})"
        space = ConfigSpace()
        sch, self.tensors = tpl.run(space, self.args, self.kwargs)
        space.freeze()
        self.config_space = space
        self.func = sch.original
        self.workload = Workload(self.func, structural_hash(self.func))
        self.flop = space.flop or flop_count(self.func)
        self.warned = False  # about running with the fallback config

    def instantiate(self, config) -> tuple:
        """(schedule, tensors) of the template with `config` (a ConfigEntity of this task's
        space, or its index). Raises ScheduleError if a primitive refuses the config."""
        if not isinstance(config, ConfigEntity):
            config = self.config_space.get(config)
        if config.space is not self.config_space:
            raise TemplateError(f"{self.name}: the config #{config.index} is of another task's "
                                "space; take configs from task.config_space")
        return self.template.run(config, self.args, self.kwargs)

    def config_trace(self, config: ConfigEntity) -> Trace:
        """A trace of the config's knobs alone (what a config that fails to apply records)."""
        sch = Schedule(self.func, seed=0)
        for name, space in self.config_space.space_map.items():
            sch.sample_knob(name, space.candidates, decision=config._sub[name])
        return sch.trace

    def fallback_config(self) -> FallbackConfigEntity:
        return FallbackConfigEntity(self.config_space, 0)

    def tune_context(self, strategy="template-xgb", *, seed: int | None = None, **options):
        """The task as the engine's TuneContext: its design space (TemplateSpace) searched
        by a template strategy (a registered name - "template-xgb", "template-ga", ... - with
        its `options`, or an instance), for tune_tasks beside any other task."""
        from ..tune.context import TuneContext
        from ..tune.search_strategy.base import SearchStrategy
        from .space_generator import TemplateSpace
        return TuneContext(self.func, self.target, TemplateSpace(self),
                           SearchStrategy.create(strategy, **options), task_name=self.name,
                           seed=seed, flops=self.flop)

    def __repr__(self):
        return f"Task({self.name}, {len(self.config_space)} configs, target={self.target})"


def create(name, args=(), target="cpu", *, kwargs=None) -> TemplateTask:
    """The task of template `name` (or a Template) with `args`: runs it once to collect its
    config space and workload."""
    tpl = name if isinstance(name, Template) else TEMPLATES.lookup(name)
    return tpl.task(args, kwargs, target)
