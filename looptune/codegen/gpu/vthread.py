"""Virtual threads: a loop bound to `vthread.*` declares iterations that may run as if in
parallel, inside each real thread. Lowering pushes the vthread loop down the loop nest to
the statements that use its variable, so whatever does not depend on it runs once:

    for vt in vthread(2):                       for ko:
      for tx in threadIdx.x(32):                  for tx in threadIdx.x(32):
        for ko:                           ->        A_shared[...] = A[...]       (once)
          A_shared[...] = A[...]                  for tx in threadIdx.x(32):
          C_local[i] += A_shared[vt * 4 + i]        for vt (unrolled): C_local[vt, i] += ...

A shared tile under a vthread loop covers all virtual threads (compute_at and buffer
compaction relax vthread loops for shared memory, as they relax threadIdx loops), so the
copy into it is the same for every virtual thread and is done once, where a serial loop
would fetch it once per virtual thread. Storage private to a thread ("local") allocated
under the loop gets one copy per virtual thread: a leading dimension indexed by the
variable. Each statement that uses the variable keeps an unrolled loop of its own: the
virtual threads become a register tile.

The push stops, keeping the loop serial around what is below (as unrolled loops, which is
always correct), at a barrier, at a vectorized loop, at a condition that uses the variable,
and at a statement that reads and writes one buffer without using the
variable (it would run once instead of once per virtual thread)."""
from __future__ import annotations

from ...tir.buffer import Buffer
from ...tir.expr import BufferLoad
from ...tir.func import PrimFunc
from ...tir.functor import find_stmts, map_children, transform, uses_var
from ..passes.compact import reads_itself
from ...tir.stmt import (Allocate, BufferStore, Evaluate, For, IfThenElse, SeqStmt, is_barrier,
                         seq)


def is_vthread(s) -> bool:
    return isinstance(s, For) and s.kind == "thread_binding" and s.thread.startswith("vthread")


def inject_vthreads(func: PrimFunc) -> PrimFunc:
    """Push every vthread loop of the (block-lowered, compacted) `func` to the statements that
    use its variable, as unrolled loops."""
    def walk(s):
        s = map_children(s, walk)
        return _push(s.loop_var, s.extent, s.body, s.annotations) if is_vthread(s) else s
    return func.with_body(walk(func.body))


def _serial(var, extent, s, ann) -> For:
    return For(var, extent, "unrolled", s, None, ann)


def _push(var, extent, s, ann):
    """A statement equivalent to `for var in vthread(extent): s`."""
    vs = {var}
    if not uses_var(s, vs):
        return s if _idempotent(s) else _serial(var, extent, s, ann)
    if _has_barrier(s):
        return _serial(var, extent, s, ann)
    if isinstance(s, SeqStmt):
        return seq(*(_push(var, extent, x, ann) for x in s.stmts))
    if isinstance(s, For):
        if s.kind == "vectorized":
            return _serial(var, extent, s, ann)
        return For(s.loop_var, s.extent, s.kind, _push(var, extent, s.body, ann), s.thread,
                   s.annotations)
    if isinstance(s, Allocate):
        body = s.body
        if s.buffer.scope != "shared":  # private to each virtual thread
            body, buf = _expand(s.buffer, var, extent, body)
            return Allocate(buf, _push(var, extent, body, ann))
        return Allocate(s.buffer, _push(var, extent, body, ann))
    if isinstance(s, IfThenElse) and not uses_var(s.cond, vs):
        other = None if s.else_case is None else _push(var, extent, s.else_case, ann)
        return IfThenElse(s.cond, _push(var, extent, s.then_case, ann), other)
    return _serial(var, extent, s, ann)


def _has_barrier(s) -> bool:
    return any(is_barrier(x) for x in find_stmts(s, Evaluate))


def _idempotent(s) -> bool:
    """Does running `s` twice leave memory as running it once? (No store reads its own
    buffer: copies and initializations, not accumulations.)"""
    return not any(reads_itself(st) for st in find_stmts(s, BufferStore))


def _expand(buf: Buffer, var, extent: int, body):
    """(body, buffer) with `buf` given a leading dimension of `extent` indexed by `var`."""
    strides = None if buf.strides is None else (buf.strides[0] * buf.shape[0],) + buf.strides
    align = tuple((axis + 1, f, o) for axis, f, o in buf.align)
    new = Buffer(buf.name, (extent,) + tuple(buf.shape), buf.dtype, buf.scope, strides, align)

    def fn(n):
        if isinstance(n, BufferLoad) and n.buffer is buf:
            return BufferLoad(new, (var,) + tuple(n.indices), n.dtype)
        if isinstance(n, BufferStore) and n.buffer is buf:
            return BufferStore(new, n.value, (var,) + tuple(n.indices))
        return n
    return transform(body, fn), new
