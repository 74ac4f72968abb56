"""The tuner's registries: every pluggable concept (rule, postprocessor, database, ...)
accepts a registered name ("sqlite") or an instance, so `Database.create("json",
work_dir=...)` and a user's own subclass are used the same way. They are looptune.Registry
with the tuner's error type."""
from __future__ import annotations

from .. import registry
from .error import TuneError


class Registry(registry.Registry):
    """A looptune.Registry whose lookups raise TuneError."""

    def __init__(self, kind: str):
        super().__init__(kind, error=TuneError)
