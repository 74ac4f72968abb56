"""Buffers: named, typed, statically shaped memory that loads and stores address."""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from . import dtype as dt

SCOPES = ("global", "local", "shared")


@dataclass(frozen=True, eq=False, repr=False)
class Buffer:
    """A buffer; equality is identity, so two buffers of the same name are different.

    The layout is row-major. `strides` (in elements) overrides it; `align` holds
    (axis, factor, offset) rules from storage_align: the stride of `axis` is padded to the
    smallest s >= its compact value with s % factor == offset.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    scope: str = "global"
    strides: tuple[int, ...] | None = field(default=None)
    align: tuple = ()

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
        if self.strides is None and not self.align:
            return prod(self.shape)
        return max(1, 1 + sum((n - 1) * s for n, s in zip(self.shape, self.layout_strides())))

    def layout_strides(self) -> tuple[int, ...]:
        if self.strides is not None:
            return self.strides
        out, acc = [], 1
        for d in range(self.ndim - 1, -1, -1):
            s = acc
            for axis, factor, offset in self.align:
                if axis == d:
                    s += (offset - s) % factor
            out.append(s)
            acc = s * self.shape[d]
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
