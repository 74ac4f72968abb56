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
