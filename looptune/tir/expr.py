"""Expressions of the loop-nest IR: constants, variables, arithmetic, loads, calls, vectors.

Nodes are frozen dataclasses compared by identity; `structural_equal` compares by shape.
`a == b` builds an equality expression (as `a < b` does), whose truth value is identity.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import dtype as dt
from .buffer import Buffer

ARITH_OPS = ("+", "-", "*", "/", "//", "%", "min", "max", "tdiv", "tmod")
CMP_OPS = ("==", "!=", "<", "<=", ">", ">=")
LOGIC_OPS = ("and", "or")
FLOAT_INTRINSICS = ("exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "pow", "fmod",
                    "floor", "ceil", "sin", "cos", "round")
INTRINSICS = FLOAT_INTRINSICS + ("abs",)


class ExprOps:
    """Operator overloading shared by expressions and iteration variables."""

    __slots__ = ()

    def __add__(self, o): return binary("+", self, o)
    def __radd__(self, o): return binary("+", o, self)
    def __sub__(self, o): return binary("-", self, o)
    def __rsub__(self, o): return binary("-", o, self)
    def __mul__(self, o): return binary("*", self, o)
    def __rmul__(self, o): return binary("*", o, self)
    def __truediv__(self, o): return binary("/", self, o)
    def __rtruediv__(self, o): return binary("/", o, self)
    def __floordiv__(self, o): return binary("//", self, o)
    def __rfloordiv__(self, o): return binary("//", o, self)
    def __mod__(self, o): return binary("%", self, o)
    def __rmod__(self, o): return binary("%", o, self)
    def __lt__(self, o): return binary("<", self, o)
    def __le__(self, o): return binary("<=", self, o)
    def __gt__(self, o): return binary(">", self, o)
    def __ge__(self, o): return binary(">=", self, o)
    def __eq__(self, o):
        return binary("==", self, o) if isinstance(o, _OPERANDS) else NotImplemented

    def __ne__(self, o):
        return binary("!=", self, o) if isinstance(o, _OPERANDS) else NotImplemented

    def __and__(self, o): return binary("and", self, o)
    def __rand__(self, o): return binary("and", o, self)
    def __or__(self, o): return binary("or", self, o)
    def __ror__(self, o): return binary("or", o, self)
    def __neg__(self): return binary("-", const(0, convert(self).dtype), self)
    def __invert__(self): return Not(convert(self))
    __hash__ = object.__hash__

    def __bool__(self):
        raise TypeError(f"the symbolic expression {self!r} has no truth value; "
                        "use te.if_then_else / te.all for conditions")

    def astype(self, dtype: str) -> "PrimExpr":
        return cast(self, dtype)


_OPERANDS = (ExprOps, int, float)


class PrimExpr(ExprOps):
    """Base of every expression node: it has a dtype, Python operators build new nodes
    (ExprOps), and repr prints it as the script does."""
    __slots__ = ()
    dtype: str

    def __repr__(self):
        from .printer import expr_str
        return expr_str(self)


def _node(cls):
    return dataclass(frozen=True, eq=False, repr=False, slots=True)(cls)


@_node
class IntImm(PrimExpr):
    """An integer or bool constant."""
    value: int
    dtype: str = "int32"


@_node
class FloatImm(PrimExpr):
    """A floating-point constant (rounded to its dtype by `const`)."""
    value: float
    dtype: str = "float32"


@_node
class Var(PrimExpr):
    """A scalar variable; two Vars are the same only if they are the same object (names may
    clash)."""
    name: str
    dtype: str = "int32"


@_node
class Binary(PrimExpr):
    """Arithmetic ("+", "//", "min", ...), comparison ("<", "==", ...) or logic ("and", "or").

    `//` and `%` round towards minus infinity (floordiv / floormod); `tdiv` and `tmod` are C's
    truncating forms, introduced by lowering once operands are known non-negative. Integer
    division and modulo by 0 give 0 and INT_MIN // -1 gives INT_MIN, as numpy's (never a
    trap): in compiled code, the interpreter and constant folding alike.
    """
    op: str
    a: PrimExpr
    b: PrimExpr
    dtype: str

    def __bool__(self):
        if self.op == "==":
            return self.a is self.b
        if self.op == "!=":
            return self.a is not self.b
        return PrimExpr.__bool__(self)


@_node
class Not(PrimExpr):
    """Logical negation of a bool expression."""
    a: PrimExpr
    dtype: str = "bool"


@_node
class Cast(PrimExpr):
    """`value` converted to `dtype`."""
    value: PrimExpr
    dtype: str


@_node
class Select(PrimExpr):
    """`cond ? true_value : false_value`; only the chosen side is evaluated (as in C)."""
    cond: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr
    dtype: str


@_node
class Call(PrimExpr):
    """A math intrinsic such as exp or sqrt, applied lane-wise."""
    op: str
    args: tuple
    dtype: str


# Call(INDEX_CHECK_OP, (index, size, wrap, site)): `index` checked against an axis of `size`
# (codegen/passes/check_index.py makes them, for indices loaded from memory)
INDEX_CHECK_OP = "lt_check_index"
# Call(PREFETCH_OP, (BufferLoad,)): fetch the cache line of that element ahead of its use, a
# hint without effect on results (codegen/passes/prefetch.py makes them, in compiled C only)
PREFETCH_OP = "lt_prefetch"


@_node
class BufferLoad(PrimExpr):
    """The element of `buffer` at `indices` (one per dimension)."""
    buffer: Buffer
    indices: tuple
    dtype: str


@_node
class Ramp(PrimExpr):
    """The vector (base, base + stride, ..., base + (lanes-1) * stride)."""
    base: PrimExpr
    stride: int
    lanes: int
    dtype: str


@_node
class Broadcast(PrimExpr):
    """The vector of `lanes` copies of a scalar `value`."""
    value: PrimExpr
    lanes: int
    dtype: str


@_node
class Reduce(PrimExpr):
    """A tensor-expression reduction (sum, max, min, prod) over reduction axes."""
    combiner: str
    source: PrimExpr
    axis: tuple
    identity: PrimExpr
    dtype: str


# ---------------------------------------------------------------------------- constructors
def const(value, dtype: str | None = None) -> PrimExpr:
    if dtype is None:
        dtype = "bool" if isinstance(value, bool) else "int32" if isinstance(value, int) else "float32"
        if dtype == "int32" and not -2**31 <= value < 2**31:
            dtype = "int64"
    if dt.is_float(dtype):
        return FloatImm(_round_float(float(value), dtype), dtype)
    if isinstance(value, float) and not value.is_integer():
        raise TypeError(f"cannot make a {dtype} constant of {value}")
    return IntImm(bool(value) if dt.is_bool(dtype) else int(value), dtype)


def _round_float(v: float, dtype: str) -> float:
    if dt.element(dtype) == "float32" and math.isfinite(v):
        import numpy as np
        return float(np.float32(v))
    return v


def convert(x, dtype: str | None = None) -> PrimExpr:
    """Python scalars become constants (of `dtype` when given); IterVars become their var."""
    if isinstance(x, PrimExpr):
        return x
    if isinstance(x, (bool, int, float)):
        return const(x, dtype)
    var = getattr(x, "var", None)
    if isinstance(var, Var):
        return var
    import numpy as np
    if isinstance(x, np.generic):
        return const(x.item(), dtype or dt.check(x.dtype))
    raise TypeError(f"cannot use {x!r} ({type(x).__name__}) in an expression")


def _scalar_dtype_for(py, other: str) -> str:
    """The dtype a Python scalar takes next to an expression of dtype `other`."""
    e = dt.element(other)
    if isinstance(py, bool):
        return "bool" if dt.is_bool(e) else e
    if isinstance(py, int):
        return e if not dt.is_bool(e) else "int32"
    return e if dt.is_float(e) else "float32"


def cast(x, dtype: str) -> PrimExpr:
    x = convert(x)
    dtype = dt.check(dtype)
    if dt.lanes(x.dtype) > 1 and dt.lanes(dtype) == 1:
        dtype = dt.with_lanes(dtype, dt.lanes(x.dtype))
    if x.dtype == dtype:
        return x
    if isinstance(x, (IntImm, FloatImm)):
        v = x.value
        if dt.is_int(dtype):
            v = _wrap_int(math.trunc(v), dtype)
        return const(v, dtype)
    return Cast(x, dtype)


def _wrap_int(v: int, dtype: str) -> int:
    """`v` converted to the integer type `dtype` as C does: modulo 2**bits, two's complement."""
    b = dt.bits(dtype)
    v &= (1 << b) - 1
    return v - (1 << b) if dt.kind(dtype) == "int" and v >> (b - 1) else v


def _tdiv(a: int, b: int) -> int:
    """C's truncating division, exact for integers of any size (int(a / b) rounds via float)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _fold(op, a, b):
    if op == "+": return a + b
    if op == "-": return a - b
    if op == "*": return a * b
    if op == "/": return a / b if b != 0 else None
    if op == "//": return a // b if b != 0 else 0  # numpy's: x // 0 == x % 0 == 0
    if op == "%": return a % b if b != 0 else 0
    if op == "tdiv": return _tdiv(a, b) if b != 0 else 0
    if op == "tmod": return a - b * _tdiv(a, b) if b != 0 else 0
    if op == "min": return a if a < b or a != a else b  # NaN wins, as numpy's minimum
    if op == "max": return a if a > b or a != a else b
    if op == "==": return a == b
    if op == "!=": return a != b
    if op == "<": return a < b
    if op == "<=": return a <= b
    if op == ">": return a > b
    if op == ">=": return a >= b
    if op == "and": return bool(a) and bool(b)
    if op == "or": return bool(a) or bool(b)
    raise ValueError(op)


def binary(op: str, a, b) -> PrimExpr:
    """Build `a op b` with dtype promotion, constant folding and the trivial identities."""
    if not isinstance(a, PrimExpr):
        a = convert(a, _scalar_dtype_for(a, convert(b).dtype) if isinstance(a, (int, float)) else None)
    if not isinstance(b, PrimExpr):
        b = convert(b, _scalar_dtype_for(b, a.dtype) if isinstance(b, (int, float)) else None)
    if op in LOGIC_OPS:
        if not (dt.is_bool(a.dtype) and dt.is_bool(b.dtype)):
            raise TypeError(f"'{op}' needs boolean operands, got {a.dtype} and {b.dtype}")
        ta = a.value if isinstance(a, IntImm) else None
        tb = b.value if isinstance(b, IntImm) else None
        if op == "and":
            if ta is False or tb is False: return const(False)
            if ta is True: return b
            if tb is True: return a
        else:
            if ta is True or tb is True: return const(True)
            if ta is False: return b
            if tb is False: return a
        return Binary(op, a, b, dt.with_lanes("bool", max(dt.lanes(a.dtype), dt.lanes(b.dtype))))
    if op == "/" and dt.is_int(a.dtype) and dt.is_int(b.dtype):
        raise TypeError(f"'/' on integers ({a!r} / {b!r}) is ambiguous; use // (floor division)"
                        " or cast to a float type first")
    if op in ("//", "%", "tdiv", "tmod") and not (dt.is_int(a.dtype) and dt.is_int(b.dtype)):
        raise TypeError(f"'{op}' needs integer operands, got {a.dtype} and {b.dtype}")
    t = dt.promote(a.dtype, b.dtype)
    if a.dtype != t and dt.lanes(a.dtype) == dt.lanes(t):
        a = cast(a, t)
    if b.dtype != t and dt.lanes(b.dtype) == dt.lanes(t):
        b = cast(b, t)
    rt = dt.with_lanes("bool", dt.lanes(t)) if op in CMP_OPS else t
    ca = a.value if isinstance(a, (IntImm, FloatImm)) else None
    cb = b.value if isinstance(b, (IntImm, FloatImm)) else None
    if ca is not None and cb is not None:
        v = _fold(op, ca, cb)
        if v is not None and op in ("//", "%", "tdiv", "tmod"):
            v = _wrap_int(v, rt)  # INT_MIN // -1 == INT_MIN, as numpy (and C's wrap)
        if v is not None:
            return const(v, rt)
    if dt.is_int(t):
        if op == "+":
            if ca == 0: return b
            if cb == 0: return a
        elif op == "-":
            if cb == 0: return a
        elif op == "*":
            if ca == 1: return b
            if cb == 1: return a
            if ca == 0 or cb == 0: return const(0, t)
        elif op in ("//", "tdiv"):
            if cb == 1: return a
            if cb == 0: return const(0, t)
        elif op in ("%", "tmod"):
            if cb in (0, 1, -1): return const(0, t)
    return Binary(op, a, b, rt)


def min_(a, b) -> PrimExpr:
    return binary("min", a, b)


def max_(a, b) -> PrimExpr:
    return binary("max", a, b)


def call(op: str, *args) -> PrimExpr:
    if op not in INTRINSICS:
        raise ValueError(f"unknown intrinsic {op!r}; known: {', '.join(INTRINSICS)}")
    args = tuple(convert(x) for x in args)
    if op in ("pow", "fmod") and len(args) == 2:
        t = dt.promote(args[0].dtype, args[1].dtype)
        args = tuple(cast(x, t) for x in args)
    d = args[0].dtype
    if op in FLOAT_INTRINSICS and not dt.is_float(d):
        raise TypeError(f"{op} expects a float expression, got {d} ({args[0]!r}); "
                        "cast it first, e.g. x.astype('float32')")
    return Call(op, args, d)


def select(cond, true_value, false_value) -> PrimExpr:
    cond = convert(cond)
    if not dt.is_bool(cond.dtype):
        raise TypeError(f"if_then_else condition must be boolean, got {cond.dtype} ({cond!r})")
    if isinstance(true_value, PrimExpr) or not isinstance(false_value, PrimExpr):
        t = convert(true_value)
        f = convert(false_value, _scalar_dtype_for(false_value, t.dtype)
                    if isinstance(false_value, (int, float)) else None)
    else:
        f = convert(false_value)
        t = convert(true_value, _scalar_dtype_for(true_value, f.dtype))
    d = dt.promote(t.dtype, f.dtype)
    t, f = cast(t, d), cast(f, d)
    if isinstance(cond, IntImm):
        return t if cond.value else f
    return Select(cond, t, f, d)


def is_const(e, value=None) -> bool:
    return isinstance(e, (IntImm, FloatImm)) and (value is None or e.value == value)
