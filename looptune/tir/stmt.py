"""Statements of the loop-nest IR: loops, blocks, stores, sequences and conditions.

A block is the unit that schedules move around: it names its iteration variables (spatial
"S" or reduction "R", each over [0, extent)), the buffer regions it reads and writes (in
terms of those variables), an optional reduction `init`, and its body. A BlockRealize binds
the block's variables to expressions of the surrounding loop variables.
"""
from __future__ import annotations

from dataclasses import dataclass

from .buffer import Buffer
from .expr import ExprOps, PrimExpr, Var, const

LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread_binding")


class Stmt:
    """Base of every statement node; repr prints it as the script does."""
    __slots__ = ()

    def __repr__(self):
        from .printer import stmt_str
        return stmt_str(self)


def _node(cls):
    return dataclass(frozen=True, eq=False, repr=False, slots=True)(cls)


@dataclass(frozen=True, eq=False, repr=False)
class IterVar(ExprOps):
    """An iteration variable over [0, extent): "S" (spatial) or "R" (reduction)."""

    var: Var
    extent: int
    kind: str = "S"

    @property
    def name(self) -> str:
        return self.var.name

    @property
    def dtype(self) -> str:
        return self.var.dtype

    def __repr__(self):
        return f"IterVar({self.var.name}, {self.extent}, {self.kind!r})"


@dataclass(frozen=True, eq=False, repr=False)
class BufferRegion:
    """A rectangular region of a buffer: one (min, extent) pair per dimension."""

    buffer: Buffer
    region: tuple  # ((min: PrimExpr, extent: int), ...)

    def __repr__(self):
        from .printer import region_str
        return region_str(self)


@_node
class BufferStore(Stmt):
    """`buffer[indices] = value`."""
    buffer: Buffer
    value: PrimExpr
    indices: tuple


@_node
class SeqStmt(Stmt):
    """Statements run one after another."""
    stmts: tuple


@_node
class IfThenElse(Stmt):
    """`if cond: then_case else: else_case` (else_case may be None)."""
    cond: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None


@_node
class For(Stmt):
    """`for loop_var in range(extent)`; loops always start at 0.

    `thread` names the GPU thread axis of a thread_binding loop; annotations is a tuple of
    (key, value) pairs kept sorted by key.
    """
    loop_var: Var
    extent: int
    kind: str
    body: Stmt
    thread: str | None = None
    annotations: tuple = ()

    def annotation(self, key, default=None):
        return annotation(self.annotations, key, default)


@_node
class Block(Stmt):
    """A block (module docstring): its iteration variables, the regions it reads and writes, its
    body and optional reduction `init`."""
    name: str
    iter_vars: tuple
    reads: tuple
    writes: tuple
    body: Stmt
    init: Stmt | None = None
    alloc_buffers: tuple = ()
    annotations: tuple = ()

    def annotation(self, key, default=None):
        return annotation(self.annotations, key, default)

    @property
    def is_reduction(self) -> bool:
        return self.init is not None or any(iv.kind == "R" for iv in self.iter_vars)


@_node
class BlockRealize(Stmt):
    """A block placed in the loop nest: its iteration variables bound to `iter_values`, run only
    where `predicate` holds."""
    iter_values: tuple
    predicate: PrimExpr
    block: Block


@_node
class Allocate(Stmt):
    """Storage for `buffer` over `body` (produced by lowering)."""
    buffer: Buffer
    body: Stmt


@_node
class Comment(Stmt):
    """A note for readers of the generated code (lowering adds them; no effect)."""
    text: str


@_node
class Evaluate(Stmt):
    """Evaluate an expression for its effect (e.g. a GPU barrier call)."""
    value: PrimExpr


def seq(*stmts) -> Stmt:
    """A SeqStmt of the given statements, flattening nested sequences; one stays itself."""
    flat = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(tuple(flat))


def annotation(annotations: tuple, key: str, default=None):
    """The value of `key` in a sorted tuple of (key, value) pairs."""
    for k, v in annotations:
        if k == key:
            return v
    return default


def with_annotation(annotations: tuple, key: str, value) -> tuple:
    d = dict(annotations)
    if value is None:
        d.pop(key, None)
    else:
        d[key] = value
    return tuple(sorted(d.items()))


TRUE = const(True)


BARRIER_OP = "syncthreads"


def barrier() -> "Evaluate":
    """A GPU thread-block barrier (`__syncthreads()`): every thread of the block waits here
    until all have arrived, and shared-memory writes before it are visible after it."""
    from .expr import Call
    return Evaluate(Call(BARRIER_OP, (), "int32"))


def is_barrier(s) -> bool:
    return isinstance(s, Evaluate) and getattr(s.value, "op", None) == BARRIER_OP


SHFL_DOWN_OP = "shfl_down"


def shfl_down(value, delta: int, width: int):
    """A GPU warp shuffle (`__shfl_down_sync(0xffffffff, value, delta, width)`), the value
    of lane `lane + delta` in the caller's group of `width` lanes (its own value where that
    lane is past the group's end). A warp-collective: all 32 lanes of the warp must reach
    it together. `width` is a power of two up to 32."""
    from .expr import Call, const
    if width & (width - 1) or not 1 <= width <= 32 or not 0 < delta < width:
        raise ValueError(f"shfl_down: width {width} must be a power of two up to 32 and "
                         f"delta {delta} in 1..{width - 1}")
    return Call(SHFL_DOWN_OP, (value, const(delta), const(width)), value.dtype)
