"""Unrolling: mark loops under a `pragma_auto_unroll_max_step` annotation for unrolling,
and say which are unrolled explicitly (the body copied per iteration) where
`pragma_unroll_explicit` asks.

A loop is auto-unrolled when the statements it runs in total (its extent times its body's
count) are at most the max step. A vectorized loop counts as the vector statements it
becomes (registers of `vector_bits`: 8 float lanes with AVX2, 16 with AVX-512; 6 lanes are
4 + 2), so unrolling around wide vectors stays within the budget. The max step applies to
each annotated loop nest; `cap_unrolling` then bounds the whole kernel's printed copies
(MAX_COPIED_STATEMENTS), which is what the C compiler's time grows with.
"""
from __future__ import annotations

from ...tir.expr import Binary, BufferLoad, Call, IntImm, Ramp, Select, binary, const
from ...tir.intrin.base import INTRIN_OP, TENSORIZE
from ...tir.functor import map_children, stmt_children, substitute, transform, uses_var, visit
from ...tir.stmt import BufferStore, Evaluate, For, IfThenElse, SeqStmt, seq, with_annotation
from .vectorize import vector_pieces

EXPLICIT = "pragma_unroll_explicit"
MAX_STEP = "pragma_auto_unroll_max_step"
EXPLICIT_LIMIT = 512  # never copy a body more often than this
# At most this many statements printed for a kernel's explicit copies (a vector statement
# counts once): past it, the outermost copied loops stay loops. Conv2d candidates of 1000+
# copied statements (0.5-0.9 MB of C) took GCC 4-10 s each, most of a trial's time, and none
# was among the fastest.
MAX_COPIED_STATEMENTS = 512


def auto_unroll(stmt, *, vector_bits: int = 256):
    """Apply the unroll annotations found on loops."""
    lanes = max(1, vector_bits // 32)  # float32 lanes per emitted vector statement

    def walk(s):
        if isinstance(s, For) and s.annotation(MAX_STEP):
            body, _ = _mark(s.body, int(s.annotation(MAX_STEP)), bool(s.annotation(EXPLICIT, 0)),
                            lanes)
            return map_children(s, lambda _: body)
        return map_children(s, walk)
    return walk(stmt)


def _mark(s, max_step: int, explicit: bool, lanes: int):
    if isinstance(s, For) and s.annotation(TENSORIZE) is not None:
        return s, 1  # one call of the tensor intrinsic
    if isinstance(s, For):
        body, steps = _mark(s.body, max_step, explicit, lanes)
        total = steps * (len(vector_pieces(s.extent, lanes) or (0,) * s.extent)
                         if s.kind == "vectorized" else s.extent)
        kind, ann = s.kind, s.annotations
        if s.kind == "serial" and s.extent > 1 and total <= max_step:
            kind = "unrolled"
            if explicit:
                ann = with_annotation(ann, EXPLICIT, 1)
        return For(s.loop_var, s.extent, kind, body, s.thread, ann), total
    steps = []

    def mark(x):
        y, n = _mark(x, max_step, explicit, lanes)
        steps.append(n)
        return y

    out = map_children(s, mark)
    if not steps and not isinstance(s, SeqStmt):
        return s, 1  # a store, a comment, ...
    # the branches of a condition are alternatives; the items of a sequence all run
    return out, max(steps) if isinstance(s, IfThenElse) else sum(steps)


def explicit(loop: For) -> bool:
    """Is `loop` to be unrolled by copying its body (pragma_unroll_explicit)?"""
    return (loop.kind == "unrolled" and bool(loop.annotation(EXPLICIT))
            and loop.extent <= EXPLICIT_LIMIT)


def copied_statements(s, lanes: int) -> int:
    """Statements the C renderer prints for `s`: an explicitly unrolled loop counts its
    body once per copy, a vectorized loop once per vector piece, other loops once."""
    return _copies(s, lanes)[0]


def cap_unrolling(s, *, lanes: int, max_statements: int = MAX_COPIED_STATEMENTS):
    """Keep the explicit copies of `s` within `max_statements`: while over, the outermost
    explicitly unrolled loop whose copies print the most becomes a plain loop again (the
    C compiler may still unroll it within its own limits)."""
    while True:
        total, outer = _copies(s, lanes)
        if total <= max_statements or not outer:
            return s
        _, loop = max(outer, key=lambda t: t[0])
        s = _demote(s, loop)


def _copies(s, lanes: int):
    """(statements printed, [(statements its copies add, loop)] for the outermost explicit
    loops inside s)."""
    if isinstance(s, For):
        n, outer = _copies(s.body, lanes)
        if explicit(s):
            return n * s.extent, [(n * (s.extent - 1), s)]
        if s.kind == "vectorized":
            n *= len(vector_pieces(s.extent, lanes) or (0,))
        return n, outer
    if isinstance(s, BufferStore) or (isinstance(s, Evaluate) and isinstance(s.value, Call)
                                      and s.value.op.startswith(INTRIN_OP)):
        return 1, []
    total, outer = 0, []
    for child in stmt_children(s):
        n, o = _copies(child, lanes)
        total += n
        outer += o
    return total, outer


def _demote(s, loop: For):
    if s is loop:
        return For(s.loop_var, s.extent, "serial", s.body, s.thread,
                   with_annotation(s.annotations, EXPLICIT, None))
    return map_children(s, lambda x: _demote(x, loop))


def unroll_explicit(s, *, only=None):
    """Replace unrolled loops that carry pragma_unroll_explicit by copies of their body, the
    loop variable substituted; with `only(loop)`, just the loops it accepts. (The C renderer
    prints the copies of the other explicit loops itself, far more cheaply.)"""
    s = map_children(s, lambda x: unroll_explicit(x, only=only))
    if isinstance(s, For) and explicit(s) and (only is None or only(s)):
        v = s.loop_var
        return seq(*(substitute(s.body, {v: const(i, v.dtype)}) for i in range(s.extent)))
    return s


_FOLDED_OPS = ("//", "%", "min", "max")


def folds_per_copy(loop: For) -> bool:
    """Does the loop's body test or divide by its variable (a condition, a select, // % min
    max)? Then its copies are made in the IR, and simplifying each with its constant removes
    guards that hold for most copies (the padding of a convolution); the C compiler, not
    knowing the other variables' ranges, keeps them (measured 1.5x slower on conv2d)."""
    v = {loop.loop_var}
    found = []

    def fn(n):
        if found:
            return
        if isinstance(n, (IfThenElse, Select)) and uses_var(n.cond, v):
            found.append(n)
        elif isinstance(n, Binary) and n.op in _FOLDED_OPS and uses_var(n, v):
            found.append(n)
    visit(loop.body, fn)
    return bool(found)


def copied_terms_last(stmt):
    """Move the terms of an index that use the variable of a loop the renderer copies
    (`explicit`) to the end of its sum, before the constant: `a*56 + u*14 + b + 3` becomes
    `a*56 + b + u*14 + 3`, so that a copy reads `a*56 + b + 1 * 14 + 3` and the C compiler
    folds one constant at the end of the address, where x86 addressing takes it. (Left in
    the middle, the same copies ran 1.4x slower on conv2d.)"""
    copied = set()

    def collect(n):
        if isinstance(n, For) and explicit(n):
            copied.add(n.loop_var)
    visit(stmt, collect)
    if not copied:
        return stmt

    def index(e):
        if not (isinstance(e, Binary) and e.op in ("+", "-") and uses_var(e, copied)):
            return e
        terms = []

        def split(x, sign):
            if isinstance(x, Binary) and x.op in ("+", "-"):
                split(x.a, sign)
                split(x.b, sign if x.op == "+" else -sign)
            else:
                terms.append((sign, x))
        split(e, 1)
        rest = [t for t in terms if not isinstance(t[1], IntImm) and not uses_var(t[1], copied)]
        mine = [t for t in terms if not isinstance(t[1], IntImm) and uses_var(t[1], copied)]
        consts = [t for t in terms if isinstance(t[1], IntImm)]
        out = None
        for sign, x in rest + mine + consts:
            if out is None:
                out = x if sign > 0 else binary("-", const(0, x.dtype), x)
            else:
                out = binary("+" if sign > 0 else "-", out, x)
        return out

    def fn(n):
        if isinstance(n, BufferLoad):
            return BufferLoad(n.buffer, tuple(index(i) for i in n.indices), n.dtype)
        if isinstance(n, BufferStore):
            return BufferStore(n.buffer, n.value, tuple(index(i) for i in n.indices))
        if isinstance(n, Ramp):
            return Ramp(index(n.base), n.stride, n.lanes, n.dtype)
        return n
    return transform(stmt, fn)
