"""PrimFunc <-> plain JSON data, exactly: the result is structurally equal, hashes the same and
keeps every name. Databases store workloads this way; loading one runs no code (no pickle).

Format (version 1)::

    {"format": "looptune.tir.PrimFunc", "version": 1,
     "vars":    [[name, dtype], ...],
     "buffers": [{"name", "shape", "dtype", "scope", "strides", "align"}, ...],
     "func":    {"_": "PrimFunc", "name": ..., "params": [...], "body": {...}, "attrs": [...]}}

A node is {"_": class name, field: value, ...} with the fields of its dataclass. Vars and
buffers are shared by identity inside a function, so they live in the two tables and are
referred to as {"var": i} / {"buf": i}. Tuples become lists; a float that JSON cannot hold
is {"float": "inf" | "-inf" | "nan"}; other scalars (bool, int, float, str, None) are as is.
"""
from __future__ import annotations

import math
from dataclasses import MISSING, fields

from .buffer import Buffer
from .expr import (Binary, Broadcast, BufferLoad, Call, Cast, FloatImm, IntImm, Not, PrimExpr,
                   Ramp, Reduce, Select, Var)
from .func import PrimFunc
from .stmt import (Allocate, Block, BlockRealize, BufferRegion, BufferStore, Comment, Evaluate,
                   For, IfThenElse, IterVar, SeqStmt, Stmt)

FORMAT = "looptune.tir.PrimFunc"
FORMAT_VERSION = 1

NODE_CLASSES = {c.__name__: c for c in (
    IntImm, FloatImm, Binary, Not, Cast, Select, Call, BufferLoad, Ramp, Broadcast, Reduce,
    BufferStore, SeqStmt, IfThenElse, For, Block, BlockRealize, Allocate, Evaluate, Comment,
    IterVar, BufferRegion, PrimFunc)}

# what a field annotation (a string, under `from __future__ import annotations`) admits
_TYPES = {"int": int, "float": float, "str": str, "tuple": tuple, "None": type(None),
          "PrimExpr": PrimExpr, "Stmt": Stmt, "Var": Var, "Buffer": Buffer, "Block": Block}
# what the items of a tuple field must be, where that is one node type
_ITEMS = {("Call", "args"): PrimExpr, ("BufferLoad", "indices"): PrimExpr,
          ("BufferStore", "indices"): PrimExpr, ("Reduce", "axis"): IterVar,
          ("SeqStmt", "stmts"): Stmt, ("Block", "iter_vars"): IterVar,
          ("Block", "reads"): BufferRegion, ("Block", "writes"): BufferRegion,
          ("Block", "alloc_buffers"): Buffer, ("BlockRealize", "iter_values"): PrimExpr,
          ("PrimFunc", "params"): Buffer}
_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class _Spec:
    """Per node class: field names, admitted types, defaults (computed once)."""

    __slots__ = ("cls", "names", "types", "items", "defaults")

    def __init__(self, cls):
        fs = fields(cls)
        self.cls = cls
        self.names = tuple(f.name for f in fs)
        self.types = tuple(tuple(_type(cls, f.name, t) for t in str(f.type).split("|"))
                           for f in fs)
        self.items = tuple(_ITEMS.get((cls.__name__, f.name)) for f in fs)
        self.defaults = tuple(f.default for f in fs)


def _type(cls, field: str, annotation: str) -> type:
    t = _TYPES.get(annotation.strip().split("[")[0])
    if t is None:
        raise TypeError(f"tir.serialize: the type {annotation.strip()!r} of {cls.__name__}.{field}"
                        " is unknown here; add it to _TYPES")
    return t


_SPECS = {name: _Spec(cls) for name, cls in NODE_CLASSES.items()}
_SPEC_OF = {spec.cls: spec for spec in _SPECS.values()}


# ---------------------------------------------------------------------------- encoding
class _Encoder:
    def __init__(self):
        self.vars: dict = {}
        self.buffers: dict = {}

    def enc(self, x):
        t = type(x)
        if t is str or t is int or t is bool or x is None:
            return x
        if t is float:
            return x if math.isfinite(x) else {"float": "nan" if x != x else repr(x)}
        if t is tuple:
            return [self.enc(y) for y in x]
        if t is Var:
            i = self.vars.get(x)
            if i is None:
                i = self.vars[x] = len(self.vars)
            return {"var": i}
        if t is Buffer:
            i = self.buffers.get(x)
            if i is None:
                i = self.buffers[x] = len(self.buffers)
            return {"buf": i}
        spec = _SPEC_OF.get(t)
        if spec is None:
            raise ValueError(f"func_to_json: cannot serialize {t.__name__} ({x!r}); known nodes: "
                             f"{', '.join(sorted(NODE_CLASSES))}, Var, Buffer")
        out = {"_": t.__name__}
        for name in spec.names:
            out[name] = self.enc(getattr(x, name))
        return out


def func_to_json(func: PrimFunc) -> dict:
    """A JSON-ready dict of `func` (json.dumps works on it, allow_nan=False included)."""
    if not isinstance(func, PrimFunc):
        raise ValueError(f"func_to_json expects a PrimFunc, got {type(func).__name__}")
    e = _Encoder()
    body = e.enc(func)
    return {
        "format": FORMAT, "version": FORMAT_VERSION,
        "vars": [[v.name, v.dtype] for v in e.vars],
        "buffers": [{"name": b.name, "shape": list(b.shape), "dtype": b.dtype, "scope": b.scope,
                     "strides": None if b.strides is None else list(b.strides),
                     "align": [list(a) for a in b.align]} for b in e.buffers],
        "func": body,
    }


# ---------------------------------------------------------------------------- decoding
def _bad(msg: str):
    raise ValueError(f"func_from_json: {msg}")


def _int_list(x, what: str) -> tuple:
    if not isinstance(x, list) or not all(type(i) is int for i in x):
        _bad(f"{what} must be a list of ints, got {x!r}")
    return tuple(x)


def _make_var(i: int, entry) -> Var:
    if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(s, str) for s in entry)):
        _bad(f"vars[{i}] must be [name, dtype], got {entry!r}")
    return Var(entry[0], entry[1])


def _make_buffer(i: int, d) -> Buffer:
    keys = {"name", "shape", "dtype", "scope", "strides", "align"}
    if not isinstance(d, dict) or set(d) != keys:
        _bad(f"buffers[{i}] must be an object with keys {sorted(keys)}, got {d!r}")
    if not isinstance(d["name"], str) or not isinstance(d["dtype"], str) \
            or not isinstance(d["scope"], str):
        _bad(f"buffers[{i}]: name, dtype and scope must be strings")
    align = d["align"]
    if not isinstance(align, list):
        _bad(f"buffers[{i}].align must be a list, got {align!r}")
    try:
        return Buffer(d["name"], _int_list(d["shape"], f"buffers[{i}].shape"), d["dtype"],
                      d["scope"], None if d["strides"] is None
                      else _int_list(d["strides"], f"buffers[{i}].strides"),
                      tuple(_int_list(a, f"buffers[{i}].align") for a in align))
    except (TypeError, ValueError) as err:
        _bad(f"buffers[{i}] ({d.get('name')!r}) is invalid: {err}")


class _Decoder:
    def __init__(self, vars_, buffers):
        self.vars = vars_
        self.buffers = buffers

    def dec(self, x):
        t = type(x)
        if t is str or t is int or t is bool or t is float or x is None:
            return x
        if t is list:
            return tuple([self.dec(y) for y in x])
        if t is not dict:
            _bad(f"unexpected value {x!r} ({t.__name__})")
        node = x.get("_")
        if node is not None:
            return self.node(node, x)
        if len(x) == 1:
            (k, v), = x.items()
            if k == "var":
                return self.ref(self.vars, v, "var")
            if k == "buf":
                return self.ref(self.buffers, v, "buffer")
            if k == "float" and v in _NONFINITE:
                return _NONFINITE[v]
        _bad(f"unexpected object {x!r}: not a node ('_'), a var/buffer reference or a float")

    @staticmethod
    def ref(table, i, what):
        if type(i) is not int or not 0 <= i < len(table):
            _bad(f"{what} reference {i!r} is out of range (the table has {len(table)})")
        return table[i]

    def node(self, name, x: dict):
        spec = _SPECS.get(name)
        if spec is None:
            _bad(f"unknown node type {name!r}; known: {', '.join(sorted(NODE_CLASSES))}")
        if len(x) - 1 > len(spec.names) or any(k != "_" and k not in spec.names for k in x):
            extra = sorted(k for k in x if k != "_" and k not in spec.names)
            _bad(f"{name} has unknown fields {extra}; it has {list(spec.names)}")
        vals = []
        for fname, types, item, default in zip(spec.names, spec.types, spec.items, spec.defaults):
            if fname in x:
                v = self.dec(x[fname])
            elif default is not MISSING:
                v = default
            else:
                _bad(f"{name} lacks field {fname!r}")
            if not isinstance(v, types):
                _bad(f"{name}.{fname} must be {' or '.join(t.__name__ for t in types)}, "
                     f"got {type(v).__name__} {v!r}")
            if item is not None and not all(isinstance(y, item) for y in v):
                _bad(f"{name}.{fname} must hold only {item.__name__} items, got {v!r}")
            vals.append(v)
        try:
            return spec.cls(*vals)
        except (TypeError, ValueError) as err:
            _bad(f"cannot build {name}: {err}")


def func_from_json(obj) -> PrimFunc:
    """The PrimFunc of a `func_to_json` document (a dict, or its JSON text)."""
    if isinstance(obj, (str, bytes)):
        import json
        try:
            obj = json.loads(obj)
        except ValueError as err:
            _bad(f"not JSON: {err}")
    if not isinstance(obj, dict):
        _bad(f"expected an object, got {type(obj).__name__}")
    if obj.get("format") != FORMAT:
        _bad(f"not a {FORMAT} document (format={obj.get('format')!r})")
    if obj.get("version") != FORMAT_VERSION:
        _bad(f"format version {obj.get('version')!r} is not supported (this looptune reads "
             f"version {FORMAT_VERSION})")
    for key in ("vars", "buffers"):
        if not isinstance(obj.get(key), list):
            _bad(f"{key!r} must be a list")
    vars_ = [_make_var(i, e) for i, e in enumerate(obj["vars"])]
    buffers = [_make_buffer(i, d) for i, d in enumerate(obj["buffers"])]
    func = obj.get("func")
    if not isinstance(func, dict) or func.get("_") != "PrimFunc":
        _bad("'func' must be a PrimFunc node")
    return _Decoder(vars_, buffers).dec(func)
