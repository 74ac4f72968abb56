"""Structural hash and equality: blind to variable, buffer and function names, stable across
processes and Python versions (sha256 of a canonical token stream, never Python's hash()).

Variables and buffers are numbered in order of first appearance, so two functions are equal
when they compute the same thing in the same loop structure. Block names are kept (schedule
traces address blocks by name) unless `block_names=False`: the shape alone, under which a
record of one function applies to the other through tune.replay.
"""
from __future__ import annotations

import hashlib

from .buffer import Buffer
from .expr import FloatImm, IntImm, Var
from .functor import node_fields
from .func import PrimFunc
from .stmt import Block


class _Canon:
    def __init__(self, block_names: bool = True):
        self.tokens: list[str] = []
        self.ids: dict = {}
        self.block_names = block_names

    def ref(self, obj, tag: str):
        i = self.ids.get(obj)
        if i is None:
            i = self.ids[obj] = len(self.ids)
            if isinstance(obj, Buffer):
                self.tokens.append(f"{tag}{i}:{obj.dtype}:{obj.shape}:{obj.scope}:{obj.strides}:{obj.align}")
                return
            self.tokens.append(f"{tag}{i}:{obj.dtype}")
            return
        self.tokens.append(f"{tag}{i}")

    def walk(self, x):
        t = self.tokens
        if isinstance(x, Var):
            self.ref(x, "v")
        elif isinstance(x, Buffer):
            self.ref(x, "b")
        elif isinstance(x, IntImm):
            t.append(f"i{x.value}:{x.dtype}")
        elif isinstance(x, FloatImm):
            t.append(f"f{x.value!r}:{x.dtype}")
        elif isinstance(x, tuple):
            t.append(f"({len(x)}")
            for y in x:
                self.walk(y)
            t.append(")")
        elif isinstance(x, (str, int, float, bool)) or x is None:
            t.append(repr(x))
        elif isinstance(x, PrimFunc):
            t.append("func")
            self.walk(x.params)
            self.walk(x.body)
            self.walk(x.attrs)
        else:
            cls = type(x)
            t.append(cls.__name__)
            blind = cls is Block and not self.block_names
            for name in node_fields(cls):
                if blind and name == "name":
                    t.append("_")
                    continue
                self.walk(getattr(x, name))


def canonical(node, *, block_names: bool = True) -> str:
    c = _Canon(block_names)
    c.walk(node)
    return " ".join(c.tokens)


def structural_hash(node, *, block_names: bool = True) -> str:
    """A 16-hex-digit digest; equal for structurally equal nodes."""
    return hashlib.sha256(canonical(node, block_names=block_names).encode()).hexdigest()[:16]


def structural_equal(a, b, *, block_names: bool = True) -> bool:
    return canonical(a, block_names=block_names) == canonical(b, block_names=block_names)
