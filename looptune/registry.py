"""Registry: named things of one kind, the one way looptune keeps them.

Schedule instructions, te operators, graph operators, named workloads and every pluggable
concept of the tuner (rules, postprocessors, databases, ...) are each one `Registry`. It
reads like a dict (`reg[name]`, `name in reg`, iteration in registration order; `reg[name]
= x` replaces, for tests); `add` refuses a second, different thing under a taken name;
`lookup` fails with the registry's own error type, naming the kind and what is registered;
`create` makes an instance from a registered name, a class or an instance, so a user's own
subclass is used like a built-in.
"""
from __future__ import annotations

from collections.abc import MutableMapping


class Registry(MutableMapping):
    """Named things of one kind (module docstring). `error` is what lookups raise; `hint` ends
    that message, saying how to register one."""

    def __init__(self, kind: str, *, error: type = KeyError, hint: str = ""):
        self.kind = kind
        self.error = error    # what lookup and create raise for an unknown name
        self.hint = hint      # appended to that message: how to register one
        self._items: dict = {}

    # ------------------------------------------------------------------ a mapping
    def __getitem__(self, name):
        return self._items[name]

    def __setitem__(self, name, item):  # replaces: for tests that patch one entry
        self._items[name] = item

    def __delitem__(self, name):
        del self._items[name]

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind}: {', '.join(self._items)})"

    # ------------------------------------------------------------------ registering
    def add(self, name: str, item):
        """Register `item` as `name` (again is fine for the same item) and return it."""
        if name in self._items and self._items[name] is not item:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._items[name] = item
        return item

    def register(self, name: str):
        """Decorator: register the class or function as `name`."""
        def deco(obj):
            self.add(name, obj)
            if isinstance(obj, type):
                obj.registered_name = name
            return obj
        return deco

    # ------------------------------------------------------------------ finding
    def known(self) -> str:
        return ", ".join(sorted(self._items)) or "none"

    def lookup(self, name: str, where: str = ""):
        """The item registered as `name`, or the registry's error naming what is known."""
        item = self._items.get(name) if isinstance(name, str) else None
        if item is None:
            raise self.error(f"{where}unknown {self.kind} {name!r}; registered: {self.known()}"
                             f"{self.hint}")
        return item

    def create(self, spec, base: type, **kwargs):
        """An instance from a registered name, a class, or an instance (returned as is)."""
        if isinstance(spec, base):
            if kwargs:
                raise TypeError(f"options {sorted(kwargs)} given with an existing {self.kind} "
                                "instance")
            return spec
        if isinstance(spec, type) and issubclass(spec, base):
            return spec(**kwargs)
        if isinstance(spec, str):
            return self.lookup(spec)(**kwargs)
        raise self.error(f"expected a {self.kind} name or instance, got {spec!r}; registered: "
                         f"{self.known()}")
