"""Math intrinsics, conditions and reducers for tensor expressions."""
from __future__ import annotations

import builtins
import math

from ..tir import dtype as dt
from ..tir.expr import PrimExpr, Reduce, binary, call, cast, const, convert, select
from ..tir.stmt import IterVar
from .tensor import TEError


def exp(x): return call("exp", x)
def log(x): return call("log", x)
def sqrt(x): return call("sqrt", x)
def rsqrt(x): return call("rsqrt", x)
def tanh(x): return call("tanh", x)
def erf(x): return call("erf", x)
def sigmoid(x): return call("sigmoid", x)
def floor(x): return call("floor", x)
def ceil(x): return call("ceil", x)
def abs(x): return call("abs", x)  # noqa: A001 - mirrors numpy's name
def sin(x): return call("sin", x)
def cos(x): return call("cos", x)
def round(x): return call("round", x)  # noqa: A001 - half to even, as numpy


def pow(x, y):  # noqa: A001
    x = convert(x)
    y = convert(y, dt.element(x.dtype) if isinstance(y, (int, float)) else None)
    return call("pow", x, y)


def fmod(x, y):
    """C's fmod (np.fmod): x - n * y with n = trunc(x / y) computed exactly, the sign of x."""
    x = convert(x)
    y = convert(y, dt.element(x.dtype) if isinstance(y, (int, float)) else None)
    return call("fmod", x, y)


def if_then_else(cond, true_value, false_value) -> PrimExpr:
    """`true_value if cond else false_value`; only the chosen side is evaluated."""
    try:
        return select(cond, true_value, false_value)
    except TypeError as e:
        raise TEError(f"if_then_else: {e}") from None


def all(*conds) -> PrimExpr:  # noqa: A001
    out = const(True)
    for c in conds:
        out = binary("and", out, c)
    return out


def any(*conds) -> PrimExpr:  # noqa: A001
    out = const(False)
    for c in conds:
        out = binary("or", out, c)
    return out


def _float_max(dtype: str) -> float:
    """The largest finite value (max_value and min_value are finite, as in TVM)."""
    import numpy as np
    return float(np.finfo(dt.numpy_name(dtype)).max)


def max_value(dtype: str) -> PrimExpr:
    if dt.is_float(dtype):
        return const(_float_max(dtype), dtype)
    b = dt.bits(dtype)
    return const((1 << b) - 1 if dt.kind(dtype) == "uint" else (1 << (b - 1)) - 1, dtype)


def min_value(dtype: str) -> PrimExpr:
    if dt.is_float(dtype):
        return const(-_float_max(dtype), dtype)
    b = dt.bits(dtype)
    return const(0 if dt.kind(dtype) == "uint" else -(1 << (b - 1)), dtype)


def _max_identity(dtype: str) -> PrimExpr:
    """-inf for floats, as in numpy: the max of values that are all -inf (or of none, with
    where=) is -inf, not the lowest finite float."""
    return const(-math.inf, dtype) if dt.is_float(dtype) else min_value(dtype)


def _min_identity(dtype: str) -> PrimExpr:
    return const(math.inf, dtype) if dt.is_float(dtype) else max_value(dtype)


_IDENTITY = {"sum": lambda d: const(0, d), "prod": lambda d: const(1, d),
             "max": _max_identity, "min": _min_identity}


def _axes(axis) -> tuple:
    if isinstance(axis, IterVar):
        axis = (axis,)
    try:
        axis = tuple(axis)
    except TypeError:
        raise TEError(f"axis must be a te.reduce_axis or a list of them, got {axis!r}") from None
    for a in axis:
        if not isinstance(a, IterVar) or a.kind != "R":
            raise TEError(f"axis {a!r} is not a reduction axis; create it with te.reduce_axis")
    if not axis:
        raise TEError("a reduction needs at least one te.reduce_axis")
    return axis


def _reduce(combiner: str, expr, axis, where=None) -> Reduce:
    src = convert(expr)
    if isinstance(src, Reduce):
        raise TEError(f"{combiner}: nested reductions are not supported; reduce over several "
                      "axes at once with axis=[k1, k2]")
    axis = _axes(axis)
    ident = _IDENTITY[combiner](src.dtype)
    if where is not None:
        src = select(where, src, ident)
    return Reduce(combiner, src, axis, ident, src.dtype)


def _is_axis_arg(a) -> bool:
    if isinstance(a, IterVar):
        return True
    return (isinstance(a, (list, tuple)) and len(a) > 0
            and builtins.all(isinstance(x, IterVar) for x in a))


def sum(expr, axis, where=None) -> Reduce:  # noqa: A001
    """sum of expr over the reduction axis (or axes)."""
    return _reduce("sum", expr, axis, where)


def prod(expr, axis, where=None) -> Reduce:
    return _reduce("prod", expr, axis, where)


def max(expr, axis=None, where=None) -> PrimExpr:  # noqa: A001
    """Reduction `max(expr, axis=k)`, or the elementwise `max(a, b)` of two expressions."""
    if axis is not None and not _is_axis_arg(axis):
        return binary("max", expr, axis)
    if axis is None:
        raise TEError("te.max needs axis= (a reduction) or two expressions (elementwise)")
    return _reduce("max", expr, axis, where)


def min(expr, axis=None, where=None) -> PrimExpr:  # noqa: A001
    """Reduction `min(expr, axis=k)`, or the elementwise `min(a, b)` of two expressions."""
    if axis is not None and not _is_axis_arg(axis):
        return binary("min", expr, axis)
    if axis is None:
        raise TEError("te.min needs axis= (a reduction) or two expressions (elementwise)")
    return _reduce("min", expr, axis, where)


def astype(x, dtype: str) -> PrimExpr:
    return cast(x, dtype)
