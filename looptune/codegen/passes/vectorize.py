"""Vectorize loops marked `vectorized` into explicit vector expressions (Ramp, Broadcast,
vector loads and stores) when the body allows it: contiguous stores, loads that are
contiguous, strided or loop-invariant, and + - * /, casts and float32 exp, sigmoid, tanh and
erf (vector_math.py) on the values. Anything else
keeps the loop (the C renderer then asks the compiler to vectorize it with `omp simd`)."""
from __future__ import annotations

from ...tir import dtype as dt
from ...tir.expr import (Binary, Broadcast, BufferLoad, Call, Cast, FloatImm, IntImm, Ramp, Select,
                         Var, binary, cast, const)
from ...tir.functor import map_children, substitute, uses_var, visit
from ...tir.stmt import BufferStore, Comment, For, IfThenElse, SeqStmt, seq
from ..vector_math import OPS as VECTOR_MATH

MAX_LANES = 64


class _NoVec(Exception):
    pass


def vectorize_loops(s, vector_bits: int = 256, *, bf16_as_float32: bool = False):
    """Vectorize `vectorized` loops into vectors of at most `vector_bits` (the target's
    register width): a loop of 16 floats on AVX2 becomes two 8-lane vector statements, as
    vectors wider than the hardware's compile to slow code. `bf16_as_float32`: size vectors
    of bfloat16 as float32's, for C that computes them in float32 (codegen/c.py; GCC turned
    the NaN test of a float32x16 into 16 scalar compares on AVX2)."""
    s = map_children(s, lambda x: vectorize_loops(x, vector_bits, bf16_as_float32=bf16_as_float32))
    if isinstance(s, For) and s.kind == "vectorized" and 2 <= s.extent <= MAX_LANES:
        try:
            return _vectorize(s.loop_var, s.extent, s.body, vector_bits, bf16_as_float32)
        except _NoVec:
            pass
    return s


def _vectorize(var: Var, n: int, body, vector_bits: int, bf16_as_float32: bool):
    widest = 8
    for b in _buffers(body):
        wide = bf16_as_float32 and dt.element(b.dtype) == "bfloat16"
        widest = max(widest, 32 if wide else dt.bits(b.dtype))
    pieces = vector_pieces(n, vector_bits // widest)
    if pieces is None:
        raise _NoVec
    if len(pieces) == 1:
        return seq(Comment(f"{var.name}: vectorized, {n} lanes"), _Vectorizer(var, n).stmt(body))
    sizes = [lanes for _, lanes in pieces]
    shown = (f"{len(sizes)} x {sizes[0]}" if len(set(sizes)) == 1
             else " + ".join(map(str, sizes)))
    parts = [Comment(f"{var.name}: vectorized, {n} lanes as {shown}")]
    for start, lanes in pieces:
        if lanes == 1:
            parts.append(simplify_stmt(substitute(body, {var: const(start, var.dtype)})))
            continue
        v = Var(var.name, var.dtype)
        part = substitute(body, {var: binary("+", v, const(start, var.dtype))})
        parts.append(_Vectorizer(v, lanes).stmt(simplify_stmt(part)))
    return seq(*parts)


def vector_pieces(n: int, most: int) -> list | None:
    """[(first lane, lanes)] covering n lanes with vectors of at most `most` lanes, each a
    power of two (as GCC vectors are), widest first: 16 -> 2 x 8 with AVX2; 6 -> 4 + 2;
    56 -> 16 + 16 + 16 + 8 with AVX-512. None for an odd n: a scalar last lane next to a
    vector that updates the same buffer ran 1.5x slower than GCC's own loop (5 -> 4 + 1 on
    a dense layer's accumulator)."""
    if most < 2 or n % 2:
        return None
    out, start = [], 0
    while start < n:
        lanes = min(most, 1 << ((n - start).bit_length() - 1))
        out.append((start, lanes))
        start += lanes
    return out


def _buffers(stmt) -> set:
    out = set()

    def fn(n):
        if isinstance(n, (BufferLoad, BufferStore)):
            out.add(n.buffer)
    visit(stmt, fn)
    return out


def simplify_stmt(stmt):
    from .common import map_exprs
    from ...tir.arith import Simplifier
    return map_exprs(stmt, lambda e, dom: Simplifier(dom)(e))


def _lanes(e) -> int:
    return dt.lanes(e.dtype)


class _Vectorizer:
    def __init__(self, var: Var, lanes: int):
        self.var = var
        self.lanes = lanes
        self.stored: dict = {}  # buffer -> [store index (Ramp)]
        self.loaded: dict = {}  # buffer -> [index]

    def bcast(self, e):
        if _lanes(e) == self.lanes:
            return e
        return Broadcast(e, self.lanes, dt.with_lanes(e.dtype, self.lanes))

    def expr(self, e):
        if isinstance(e, Var):
            if e is self.var:
                return Ramp(const(0, e.dtype), 1, self.lanes, dt.with_lanes(e.dtype, self.lanes))
            return e
        if isinstance(e, (IntImm, FloatImm)):
            return e
        if not uses_var(e, {self.var}):
            self.note_loads(e)
            return e
        if isinstance(e, Binary):
            return self.binary(e)
        if isinstance(e, BufferLoad):
            idx = self.expr(e.indices[0])
            if _lanes(idx) == 1:
                self.loaded.setdefault(e.buffer, []).append(idx)
                return BufferLoad(e.buffer, (idx,), e.dtype)
            if not isinstance(idx, Ramp):
                raise _NoVec
            self.loaded.setdefault(e.buffer, []).append(idx)
            return BufferLoad(e.buffer, (idx,), dt.with_lanes(e.dtype, self.lanes))
        if isinstance(e, Cast):
            v = self.expr(e.value)
            if isinstance(v, Ramp):
                raise _NoVec
            return cast(v, dt.with_lanes(e.dtype, _lanes(v)))
        if isinstance(e, Call):
            if e.op not in VECTOR_MATH or dt.element(e.dtype) != "float32":
                raise _NoVec  # the loop stays scalar (libm), for the C compiler to try
            args = [self.expr(a) for a in e.args]
            if any(isinstance(a, Ramp) for a in args):
                raise _NoVec
            return Call(e.op, tuple(self.bcast(a) for a in args),
                        dt.with_lanes(e.dtype, self.lanes))
        if isinstance(e, Select):
            c = self.expr(e.cond)
            if _lanes(c) != 1:
                raise _NoVec
            t, f = self.expr(e.true_value), self.expr(e.false_value)
            if isinstance(t, Ramp) or isinstance(f, Ramp):
                raise _NoVec
            t, f = self.bcast(t), self.bcast(f)
            return Select(c, t, f, t.dtype)
        raise _NoVec

    def note_loads(self, e):
        from ...tir.functor import visit

        def fn(n):
            if isinstance(n, BufferLoad):
                self.loaded.setdefault(n.buffer, []).append(n.indices[0])
        visit(e, fn)

    def binary(self, e: Binary):
        a, b = self.expr(e.a), self.expr(e.b)
        la, lb = _lanes(a), _lanes(b)
        if la == 1 and lb == 1:
            return binary(e.op, a, b)
        op = e.op
        ra, rb = isinstance(a, Ramp), isinstance(b, Ramp)
        if ra or rb:
            if op in ("+", "-"):
                sign = 1 if op == "+" else -1
                if ra and rb:
                    return Ramp(binary(op, a.base, b.base), a.stride + sign * b.stride, self.lanes, a.dtype)
                if ra:
                    return Ramp(binary(op, a.base, b), a.stride, self.lanes, a.dtype)
                if op == "+":
                    return Ramp(binary("+", a, b.base), b.stride, self.lanes, b.dtype)
                return Ramp(binary("-", a, b.base), -b.stride, self.lanes, b.dtype)
            if op == "*":
                r, c = (a, b) if ra else (b, a)
                if isinstance(c, IntImm):
                    return Ramp(binary("*", r.base, c), r.stride * c.value, self.lanes, r.dtype)
            raise _NoVec
        if op not in ("+", "-", "*", "/", "min", "max"):
            raise _NoVec
        a, b = self.bcast(a), self.bcast(b)
        return Binary(op, a, b, dt.with_lanes(dt.promote(dt.element(a.dtype), dt.element(b.dtype)),
                                              self.lanes))

    def stmt(self, s):
        if isinstance(s, Comment):
            return s
        if isinstance(s, SeqStmt):
            out = seq(*(self.stmt(x) for x in s.stmts))
            self.check_hazards()
            return out
        if isinstance(s, BufferStore):
            idx = self.expr(s.indices[0])
            if not (isinstance(idx, Ramp) and idx.stride == 1):
                raise _NoVec
            value = self.bcast(self.expr(s.value))
            if isinstance(value, Ramp):
                raise _NoVec
            for other in self.stored.get(s.buffer, ()):
                if not _disjoint(other, idx, self.lanes) and not _same(other, idx):
                    raise _NoVec
            self.stored.setdefault(s.buffer, []).append(idx)
            self.check_hazards()
            return BufferStore(s.buffer, value, (idx,))
        if isinstance(s, For):
            if s.kind in ("vectorized", "parallel"):
                raise _NoVec
            return For(s.loop_var, s.extent, s.kind, self.stmt(s.body), s.thread, s.annotations)
        if isinstance(s, IfThenElse):
            c = self.expr(s.cond)
            if _lanes(c) != 1:
                raise _NoVec
            return IfThenElse(c, self.stmt(s.then_case),
                              None if s.else_case is None else self.stmt(s.else_case))
        raise _NoVec

    def check_hazards(self):
        """A buffer stored as a vector may only be loaded at exactly the stored lanes, so
        running each statement for all lanes at once cannot change what a lane reads."""
        for buf, stores in self.stored.items():
            for lidx in self.loaded.get(buf, ()):
                if not any(_same(lidx, sidx) for sidx in stores):
                    raise _NoVec


def _same(a, b) -> bool:
    from ...tir.structural import structural_equal
    return structural_equal(a, b)


def _disjoint(a: Ramp, b: Ramp, lanes: int) -> bool:
    from ...tir.arith import simplify
    d = simplify(binary("-", a.base, b.base))
    return isinstance(d, IntImm) and abs(d.value) >= lanes
