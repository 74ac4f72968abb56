"""The schedule's IR state: the current PrimFunc, an index from loops and blocks to their
place in the tree, and tree surgery that rebuilds only the paths it touches.

Loops are identified by their loop variable and blocks by their (unique) name, so handles
stay valid while the immutable tree is rebuilt around them.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..tir.func import PrimFunc
from ..tir.functor import find_stmts_with_parents, node_fields
from ..tir.stmt import Allocate, Block, BlockRealize, For, IfThenElse, SeqStmt, Stmt, seq
from .error import ScheduleError

REMOVE = object()  # replacement marker: drop the node from its parent


@dataclass(slots=True)
class Entry:
    """Where one loop or block sits: the node and its ancestors."""

    node: Stmt                 # the For or BlockRealize
    parents: tuple             # ancestors from the function body down to the direct parent


class Index:
    """Where every loop and block sits in the tree."""

    def __init__(self, body: Stmt):
        self.loops: dict = {}   # loop Var -> Entry(For)
        self.blocks: dict = {}  # block name -> Entry(BlockRealize)
        loops, blocks = self.loops, self.blocks
        for node, parents in find_stmts_with_parents(body, (For, BlockRealize)):
            if isinstance(node, For):
                loops[node.loop_var] = Entry(node, parents)
            else:
                blocks[node.block.name] = Entry(node, parents)


class State:
    """The current function of a schedule, with a lazily built Index, and the tree surgery
    primitives use; the function is replaced, never mutated."""

    def __init__(self, func: PrimFunc):
        if not isinstance(func, PrimFunc):
            raise TypeError(f"Schedule needs a PrimFunc (from te.create_prim_func), got "
                            f"{type(func).__name__}")
        self.func = func
        self._index: Index | None = None

    @property
    def index(self) -> Index:
        if self._index is None:
            self._index = Index(self.func.body)
        return self._index

    # ------------------------------------------------------------------ lookups
    def loop(self, var, what: str = "loop") -> Entry:
        e = self.index.loops.get(var)
        if e is None:
            raise ScheduleError(f"{what} {var.name} no longer exists: an earlier instruction "
                                "(split, fuse, compute_at, ...) replaced it; use the loops that "
                                "instruction returned")
        return e

    def block(self, name: str) -> Entry:
        e = self.index.blocks.get(name)
        if e is None:
            known = ", ".join(sorted(self.index.blocks)) or "none"
            raise ScheduleError(f"no block named {name!r}; blocks are: {known}")
        return e

    def loops_of(self, name: str) -> list:
        """The For nodes enclosing block `name`, outermost first."""
        return [p for p in self.block(name).parents if isinstance(p, For)]

    def scope_block_of(self, entry: Entry) -> Block:
        """The innermost block that encloses a loop or block entry (its scope)."""
        for p in reversed(entry.parents):
            if isinstance(p, Block):
                return p
        return self.func.root

    # ------------------------------------------------------------------ surgery
    def replace(self, mapping: dict):
        """Rebuild the tree with nodes replaced (by identity), or dropped for REMOVE.

        Loops whose body becomes empty are dropped too, as are empty sequences."""
        idx = self.index
        on_path = set()
        for old in mapping:
            entry = None
            if isinstance(old, For):
                entry = idx.loops.get(old.loop_var)
            elif isinstance(old, BlockRealize):
                entry = idx.blocks.get(old.block.name)
            if entry is None or entry.node is not old:
                raise AssertionError(f"replace: node not in tree: {old!r}")
            on_path.update(id(p) for p in entry.parents)
        new_body = _rebuild(self.func.body, {id(k): v for k, v in mapping.items()}, on_path)
        if new_body is REMOVE or new_body is None:
            raise ScheduleError("the schedule would leave the function empty")
        self.func = self.func.with_body(new_body)
        self._index = None

    def set_func(self, func: PrimFunc):
        self.func = func
        self._index = None


def _rebuild(node, mapping: dict, on_path: set):
    key = id(node)
    if key in mapping:
        return mapping[key]
    if key not in on_path:
        return node
    if isinstance(node, SeqStmt):
        out, changed = [], False
        for s in node.stmts:
            ns = _rebuild(s, mapping, on_path)
            changed |= ns is not s
            if ns is not REMOVE and ns is not None:
                out.append(ns)
        if not changed:
            return node
        return seq(*out) if out else REMOVE
    cls = type(node)
    vals = [getattr(node, f) for f in node_fields(cls)]
    changed = False
    for i, v in enumerate(vals):
        if isinstance(v, Stmt):
            nv = _rebuild(v, mapping, on_path)
            if nv is not v:
                if nv is REMOVE:
                    if isinstance(node, IfThenElse) and i == 2:
                        nv = None
                    elif isinstance(node, Block) and i == 5:  # init
                        nv = None
                    else:
                        return REMOVE
                vals[i] = nv
                changed = True
    return cls(*vals) if changed else node


def with_body(node, body):
    """Copy of a For / Block / BlockRealize-free container with a new body."""
    if isinstance(node, For):
        return For(node.loop_var, node.extent, node.kind, body, node.thread, node.annotations)
    if isinstance(node, Block):
        return Block(node.name, node.iter_vars, node.reads, node.writes, body, node.init,
                     node.alloc_buffers, node.annotations)
    if isinstance(node, Allocate):
        return Allocate(node.buffer, body)
    raise TypeError(type(node))


def child_stmts(node) -> tuple:
    """The statements directly inside a loop or block body (a sequence is looked through)."""
    body = node.body if not isinstance(node, BlockRealize) else node.block.body
    return body.stmts if isinstance(body, SeqStmt) else (body,)

