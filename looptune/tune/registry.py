"""Registries: every pluggable concept (rule, postprocessor, database, ...) accepts either a
registered name ("sqlite") or an instance, so `Database.create("json", work_dir=...)` and a
user's own subclass are used the same way."""
from __future__ import annotations

from .error import TuneError


class Registry:
    def __init__(self, kind: str):
        self.kind = kind
        self.items: dict = {}

    def register(self, name: str):
        """Class decorator: make the class creatable by `name`."""
        def deco(cls):
            if name in self.items and self.items[name] is not cls:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self.items[name] = cls
            cls.registered_name = name
            return cls
        return deco

    def create(self, spec, base: type, **kwargs):
        """An instance from a registered name, a class, or an instance (returned as is)."""
        if isinstance(spec, base):
            if kwargs:
                raise TypeError(f"options {sorted(kwargs)} given with an existing {self.kind} instance")
            return spec
        if isinstance(spec, type) and issubclass(spec, base):
            return spec(**kwargs)
        if isinstance(spec, str):
            cls = self.items.get(spec)
            if cls is None:
                raise TuneError(f"unknown {self.kind} {spec!r}; registered: "
                                f"{', '.join(sorted(self.items)) or 'none'}")
            return cls(**kwargs)
        raise TuneError(f"expected a {self.kind} name or instance, got {spec!r}; registered: "
                        f"{', '.join(sorted(self.items)) or 'none'}")
