"""Buffers: named, typed, statically shaped memory that loads and stores address."""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from . import dtype as dt

SCOPES = ("global", "local", "shared")


@dataclass(frozen=True, eq=False, repr=False)
class Buffer:
    """A buffer; equality is identity, so two buffers of the same name are different.

    `strides` (in elements) is None for a compact row-major layout; storage_align sets it.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    scope: str = "global"
    strides: tuple[int, ...] | None = field(default=None)

    def __post_init__(self):
        dt.parse(self.dtype)
        if self.scope not in SCOPES:
            raise ValueError(f"buffer {self.name}: unknown scope {self.scope!r}; use one of {SCOPES}")
        for s in self.shape:
            if not isinstance(s, int) or s < 1:
                raise ValueError(f"buffer {self.name}: shape {self.shape} must be positive ints")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements the buffer occupies, strides included."""
        if self.strides is None:
            return prod(self.shape)
        return max(1, 1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides)))

    def layout_strides(self) -> tuple[int, ...]:
        if self.strides is not None:
            return self.strides
        out, acc = [], 1
        for n in reversed(self.shape):
            out.append(acc)
            acc *= n
        return tuple(reversed(out))

    def __getitem__(self, indices):
        from .expr import BufferLoad, convert

        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise IndexError(f"buffer {self.name} has {self.ndim} dims, indexed with {len(indices)}")
        return BufferLoad(self, tuple(convert(i) for i in indices), self.dtype)

    def __repr__(self):
        return f"Buffer({self.name}, {list(self.shape)}, {self.dtype!r}, scope={self.scope!r})"
