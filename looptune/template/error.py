"""The errors (and the warning) of template-based tuning that callers are meant to catch."""
from __future__ import annotations

from ..tune.error import TuneError


class TemplateError(TuneError):
    """A template or knob used wrongly: an unknown template or knob, a knob defined twice
    differently or used before it is defined, a value a knob does not have, a template that
    does not return (schedule, tensors). The message says what to change."""


class TemplateWarning(UserWarning):
    """A template ran with its fallback config (no record for its workload), or a record's
    config no longer gives the schedule that was measured."""
