"""PrimFunc: a function over buffers whose body is a root block holding the loop nests."""
from __future__ import annotations

from dataclasses import dataclass

from .buffer import Buffer
from .stmt import BlockRealize, Stmt


@dataclass(frozen=True, eq=False, repr=False)
class PrimFunc:
    """`params` are the argument buffers in call order; intermediates are allocated by the
    root block. `attrs` is a tuple of (key, value) pairs."""

    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    attrs: tuple = ()

    def script(self) -> str:
        """Readable Python-like text of the function."""
        from .printer import func_str
        return func_str(self)

    def __repr__(self):
        return self.script()

    def with_body(self, body: Stmt) -> "PrimFunc":
        return PrimFunc(self.name, self.params, body, self.attrs)

    @property
    def root(self):
        body = self.body
        return body.block if isinstance(body, BlockRealize) else None

    def attr(self, key, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def structural_hash(self) -> str:
        from .structural import structural_hash
        return structural_hash(self)


class IRModule(dict):
    """TVM's `IRModule({"main": func})`: named PrimFuncs. Where one function is expected
    (a database's workload, build), a module of one function stands for it."""

    def __init__(self, functions=None):
        super().__init__(functions or {})
        for name, f in self.items():
            if not isinstance(f, PrimFunc):
                raise TypeError(f"IRModule[{name!r}] must be a PrimFunc (te.create_prim_func), "
                                f"got {type(f).__name__}")

    def script(self) -> str:
        return "\n\n".join(f"# {name}\n{f.script()}" for name, f in self.items())

    def __repr__(self):
        return self.script()


def as_prim_func(func_or_mod) -> PrimFunc:
    """The PrimFunc itself, or the one function of an IRModule."""
    if isinstance(func_or_mod, IRModule):
        if len(func_or_mod) != 1:
            raise TypeError(f"an IRModule of {len(func_or_mod)} functions stands for no one "
                            "function here; pass mod['main'] (or the function you mean)")
        return next(iter(func_or_mod.values()))
    return func_or_mod
