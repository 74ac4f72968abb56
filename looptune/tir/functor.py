"""Generic traversal and rewriting of IR trees: visit, transform, substitute.

Every node is a frozen dataclass, so one generic walker over its fields serves all node
kinds; `transform` rebuilds a node only when one of its children changed.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Callable

from .buffer import Buffer
from .expr import (Binary, BufferLoad, Cast, IntImm, FloatImm, PrimExpr, Select, Var, binary,
                   cast as make_cast, select)
from .stmt import BufferRegion, IterVar, Stmt

_FIELDS: dict[type, tuple[str, ...]] = {}
_CHILD_FIELDS: dict[type, tuple] = {}
_LEAVES = (Var, IntImm, FloatImm, Buffer, str, int, float, bool, type(None))
# fields declared with these types never hold a child node: walks skip them
_DATA_TYPES = {"str", "int", "float", "bool", "Buffer", "str | None"}


def node_fields(cls) -> tuple[str, ...]:
    f = _FIELDS.get(cls)
    if f is None:
        f = _FIELDS[cls] = tuple(x.name for x in fields(cls))
    return f


def child_fields(cls) -> tuple:
    """(position, name) of the fields of `cls` that may hold child nodes."""
    f = _CHILD_FIELDS.get(cls)
    if f is None:
        f = _CHILD_FIELDS[cls] = tuple((i, x.name) for i, x in enumerate(fields(cls))
                                       if x.type not in _DATA_TYPES)
    return f


def children(node) -> list:
    """The direct child nodes (expressions, statements, regions, iter vars) of `node`."""
    out = []
    for _, name in child_fields(type(node)):
        v = getattr(node, name)
        if type(v) is tuple:
            for x in v:
                if type(x) is tuple:
                    out.extend(y for y in x if _is_node(y))
                elif _is_node(x):
                    out.append(x)
        elif _is_node(v):
            out.append(v)
    return out


_NODE_TYPES: dict = {}


def _is_node(x) -> bool:
    t = type(x)
    r = _NODE_TYPES.get(t)
    if r is None:
        r = _NODE_TYPES[t] = issubclass(t, (PrimExpr, Stmt, BufferRegion, IterVar))
    return r


def visit(node, fn: Callable) -> None:
    """Call fn(n) on every node in pre-order."""
    stack = [node]
    while stack:
        n = stack.pop()
        fn(n)
        kids = children(n)
        if kids:
            kids.reverse()
            stack.extend(kids)


def transform(node, fn: Callable, *, pre: Callable | None = None):
    """Post-order rewrite: children first, then `fn(new_node)` (return the node to keep it).

    `pre(node)` may return a replacement that is used without visiting inside it.
    """
    if pre is not None:
        r = pre(node)
        if r is not None:
            return r
    if isinstance(node, _LEAVES):
        return fn(node)
    cls = type(node)
    vals = None
    for i, name in child_fields(cls):
        v = getattr(node, name)
        nv = _transform_value(v, fn, pre)
        if nv is not v:
            if vals is None:
                vals = [getattr(node, n) for n in node_fields(cls)]
            vals[i] = nv
    if vals is not None:
        node = _rebuild(cls, vals)
    return fn(node)


def _transform_value(v, fn, pre):
    if isinstance(v, tuple):
        out, changed = [], False
        for x in v:
            nx = _transform_value(x, fn, pre)
            changed |= nx is not x
            out.append(nx)
        return tuple(out) if changed else v
    if _is_node(v):
        return transform(v, fn, pre=pre)
    return v


def _rebuild(cls, vals):
    """Reconstruct a node; expressions go through their constructors to refold and retype."""
    if cls is Binary:
        return binary(vals[0], vals[1], vals[2])
    if cls is Cast:
        return make_cast(vals[0], vals[1])
    if cls is Select:
        return select(vals[0], vals[1], vals[2])
    if cls is BufferLoad:
        return BufferLoad(vals[0], vals[1], vals[2])
    return cls(*vals)


def _identity(n):
    return n


def substitute(node, vmap: dict):
    """Replace variables by expressions throughout `node`."""
    if not vmap:
        return node

    def pre(n):
        if isinstance(n, Var):
            return vmap.get(n, n)
        if isinstance(n, (IntImm, FloatImm)):
            return n
        return None

    return transform(node, _identity, pre=pre)


def replace_buffers(node, bmap: dict):
    """Point loads, stores and regions of the buffers in `bmap` at their replacements."""
    from .stmt import BufferStore

    def fn(n):
        if isinstance(n, BufferLoad) and n.buffer in bmap:
            return BufferLoad(bmap[n.buffer], n.indices, n.dtype)
        if isinstance(n, BufferStore) and n.buffer in bmap:
            return BufferStore(bmap[n.buffer], n.value, n.indices)
        if isinstance(n, BufferRegion) and n.buffer in bmap:
            return BufferRegion(bmap[n.buffer], n.region)
        return n

    return transform(node, fn)


def uses_var(node, var_set) -> bool:
    """Does any variable of `var_set` occur in `node`?"""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Var):
            if n in var_set:
                return True
            continue
        if isinstance(n, (IntImm, FloatImm)):
            continue
        stack.extend(children(n))
    return False


def collect_vars(node) -> set:
    out = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Var):
            out.add(n)
        elif not isinstance(n, (IntImm, FloatImm)):
            stack.extend(children(n))
    return out
