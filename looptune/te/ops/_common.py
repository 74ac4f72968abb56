"""Argument checks shared by the operators: one error type (TEError), messages that name the
operator, the tensor, its shape and what was expected."""
from __future__ import annotations

from ..tensor import TEError, Tensor


def check(cond, msg: str) -> None:
    if not cond:
        raise TEError(msg)


def shape_str(shape) -> str:
    return str(tuple(int(s) for s in shape))


def expect_tensor(op: str, arg: str, x, layout: str | None = None) -> Tensor:
    """`x` must be a Tensor; with `layout` (e.g. "NCHW") it must have one dim per letter."""
    check(isinstance(x, Tensor), f"{op}: {arg} must be a te.Tensor, got {type(x).__name__}")
    if layout is not None:
        dims = ", ".join(layout)
        check(x.ndim == len(layout), f"{op}: {arg} must be {len(layout)}-D ({dims}), "
                                     f"but {x.name} is {shape_str(x.shape)}")
    return x


def pair(op: str, what: str, v, lo: int) -> tuple[int, int]:
    """An int or a pair of ints (height, width), each >= lo."""
    vals = (v, v) if isinstance(v, int) else tuple(v) if isinstance(v, (tuple, list)) else None
    check(vals is not None and len(vals) == 2 and all(isinstance(x, int) for x in vals),
          f"{op}: {what} must be an int or a pair of ints (height, width), got {v!r}")
    check(all(x >= lo for x in vals), f"{op}: {what} must be >= {lo}, got {v!r}")
    return vals


def window_out(op: str, size: int, kernel: int, stride: int, pad: int, dilation: int,
               what: str) -> int:
    """Output extent of a sliding window: floor((size + 2 pad - dilation (kernel - 1) - 1) / stride) + 1."""
    span = dilation * (kernel - 1) + 1
    check(size + 2 * pad >= span,
          f"{op}: the {what} window spans {span} (kernel {kernel}, dilation {dilation}) but the "
          f"padded input is only {size} + 2*{pad} = {size + 2 * pad}; use a smaller kernel or "
          "more padding")
    return (size + 2 * pad - span) // stride + 1


def norm_axis(op: str, x: Tensor, axis) -> int:
    check(isinstance(axis, int) and not isinstance(axis, bool),
          f"{op}: axis must be an int, got {axis!r}")
    check(-x.ndim <= axis < x.ndim,
          f"{op}: axis {axis} is out of range for {x.name} of shape {shape_str(x.shape)}")
    return axis % x.ndim
