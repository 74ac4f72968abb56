"""Barrier placement: `__syncthreads()` wherever a shared buffer written by the block's
threads is then read (read-after-write), or read and then overwritten (write-after-read, as
when the next iteration of a loop refills a tile others still read).

The analysis is per buffer, not per element, so it may place a barrier that an exact
analysis would not; it never misses one. It walks the kernel in program order with the
shared buffers read and written since the last barrier; a loop's body is walked once and
then checked against its own start, for the dependence carried into the next iteration.
A barrier must be reached by every thread of the block: one needed under a condition that
depends on the thread (or in a thread loop shorter than the launch) is an error, not a
silent hang."""
from __future__ import annotations

from ...error import BuildError
from ...tir.expr import BufferLoad
from ...tir.functor import stmt_children, uses_var, visit
from ...tir.stmt import (Allocate, BufferStore, Evaluate, For, IfThenElse, SeqStmt, barrier,
                         is_barrier, seq)


class _State:
    __slots__ = ("read", "written")

    def __init__(self, read=(), written=()):
        self.read, self.written = set(read), set(written)

    def copy(self):
        return _State(self.read, self.written)

    def clear(self):
        self.read.clear()
        self.written.clear()

    def conflicts(self, reads, writes) -> set:
        return (reads & self.written) | (writes & self.read)


def _accesses(s, shared) -> tuple[set, set]:
    """(shared buffers read, written) in `s`, barriers or not."""
    reads, writes = set(), set()

    def fn(n):
        if isinstance(n, BufferLoad) and n.buffer in shared:
            reads.add(n.buffer)
        elif isinstance(n, BufferStore) and n.buffer in shared:
            writes.add(n.buffer)
    visit(s, fn)
    return reads, writes


def _prefix(s, shared) -> tuple[set, set]:
    """Shared accesses before the first barrier of `s` (all of them if it has none)."""
    reads, writes = set(), set()

    def walk(n) -> bool:  # True once a barrier is passed
        if is_barrier(n):
            return True
        if isinstance(n, (BufferStore, Evaluate)):
            r, w = _accesses(n, shared)
            reads.update(r)
            writes.update(w)
            return False
        if isinstance(n, IfThenElse):
            r, w = _accesses(n.cond, shared)
            reads.update(r)
            a = walk(n.then_case)
            b = walk(n.else_case) if n.else_case is not None else False
            return a and b
        for c in stmt_children(n):
            if walk(c):
                return True
        return False

    walk(s)
    return reads, writes


def insert_barriers(body, shared, launch: dict, kernel: str):
    """`body` with barriers added; `launch` maps each thread tag to its launch extent."""
    shared = set(shared)
    if not shared:
        _check_uniform(body, launch, kernel)
        return body
    return _Sync(shared, launch, kernel).stmt(body, _State(), None, frozenset())


class _Sync:
    def __init__(self, shared, launch, kernel):
        self.shared, self.launch, self.kernel = shared, launch, kernel

    def place(self, where, bufs):
        """A barrier is needed here; `where` names why it cannot be, or is None."""
        if where is not None:
            names = ", ".join(sorted(b.name for b in bufs))
            raise BuildError(f"kernel {self.kernel}: shared buffer {names} needs a "
                             f"__syncthreads() inside {where}, which not every thread of the "
                             "block reaches; bind the loops so that shared tiles are filled "
                             "and read outside thread-dependent conditions")
        return barrier()

    def stmt(self, s, st: _State, divergent, uniform_vars: frozenset):
        if is_barrier(s):
            if divergent is not None:
                raise BuildError(f"kernel {self.kernel}: a __syncthreads() inside {divergent} "
                                 "is not reached by every thread of the block")
            st.clear()
            return s
        if isinstance(s, SeqStmt):
            return seq(*(self.stmt(c, st, divergent, uniform_vars) for c in s.stmts))
        if isinstance(s, (For, IfThenElse, Allocate)) and divergent is None:
            # a barrier the statement needs before its first access goes in front of it
            # (once, and where every thread passes) rather than inside it
            r, w = _prefix(s, self.shared)
            if st.conflicts(r, w):
                st.clear()
                return seq(barrier(), self.stmt(s, st, divergent, uniform_vars))
        if isinstance(s, Allocate):
            return Allocate(s.buffer, self.stmt(s.body, st, divergent, uniform_vars))
        if isinstance(s, For):
            return self.loop(s, st, divergent, uniform_vars)
        if isinstance(s, IfThenElse):
            r, _ = _accesses(s.cond, self.shared)
            pre = []
            if st.conflicts(r, set()):
                pre.append(self.place(divergent, st.conflicts(r, set())))
                st.clear()
            st.read |= r
            thread_dependent = (not uses_only(s.cond, uniform_vars))
            inner = divergent if divergent is not None or not thread_dependent else \
                "a thread-dependent condition"
            a, b = st.copy(), st.copy()
            then = self.stmt(s.then_case, a, inner, uniform_vars)
            other = None if s.else_case is None else self.stmt(s.else_case, b, inner, uniform_vars)
            st.read, st.written = a.read | b.read, a.written | b.written
            return seq(*pre, IfThenElse(s.cond, then, other))
        # a store or an expression statement
        r, w = _accesses(s, self.shared)
        bad = st.conflicts(r, w)
        pre = []
        if bad:
            pre.append(self.place(divergent, bad))
            st.clear()
        st.read |= r
        st.written |= w
        return seq(*pre, s)

    def loop(self, s: For, st: _State, divergent, uniform_vars):
        inner_div = divergent
        if s.kind == "thread_binding":
            if s.thread.startswith("threadIdx"):
                if s.extent < self.launch.get(s.thread, 1) and divergent is None:
                    inner_div = (f"thread loop {s.loop_var.name} ({s.thread} < {s.extent} of "
                                 f"{self.launch[s.thread]} launched)")
            else:
                uniform_vars = uniform_vars | {s.loop_var}
        else:
            uniform_vars = uniform_vars | {s.loop_var}
        body = self.stmt(s.body, st, inner_div, uniform_vars)
        if s.kind != "thread_binding" and s.extent > 1:
            r, w = _prefix(body, self.shared)
            bad = st.conflicts(r, w)
            if bad:  # the next iteration overwrites / reads what this one left
                body = seq(body, self.place(inner_div, bad))
                st.clear()
        return For(s.loop_var, s.extent, s.kind, body, s.thread, s.annotations)


def uses_only(e, allowed: frozenset) -> bool:
    """Does `e` depend on nothing but the variables `allowed` and constants (no loads)?"""
    ok = [True]

    def fn(n):
        from ...tir.expr import Var
        if isinstance(n, BufferLoad) or (isinstance(n, Var) and n not in allowed):
            ok[0] = False
    visit(e, fn)
    return ok[0]


def _check_uniform(body, launch, kernel):
    """Barriers already present (from cross-thread reductions) must be reached by all."""
    _Sync(set(), launch, kernel).stmt(body, _State(), None, frozenset())


__all__ = ["insert_barriers", "uses_only", "uses_var"]
