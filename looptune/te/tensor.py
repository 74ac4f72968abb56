"""Tensors and the operations that produce them: placeholders and computes."""
from __future__ import annotations

import inspect
import numbers
import weakref
from dataclasses import dataclass

from ..tir import dtype as dt
from ..tir.buffer import Buffer
from ..tir.expr import BufferLoad, IntImm, PrimExpr, Reduce, Select, Var, cast, convert
from ..tir.functor import visit
from ..tir.stmt import IterVar


class TEError(ValueError):
    """A tensor expression is malformed; the message says what and how to fix it."""


_TENSOR_OF_BUFFER: "weakref.WeakValueDictionary[int, Tensor]" = weakref.WeakValueDictionary()
_TENSOR_OF_OP: "weakref.WeakValueDictionary[int, Tensor]" = weakref.WeakValueDictionary()


@dataclass(frozen=True, eq=False, repr=False)
class PlaceholderOp:
    """The op of an input tensor (te.placeholder): a name, no computation."""

    name: str


@dataclass(frozen=True, eq=False, repr=False)
class ComputeOp:
    """out[axis] = body, where body may be one Reduce over reduction axes."""

    name: str
    axis: tuple  # IterVars, kind "S"
    body: PrimExpr
    inputs: tuple  # Tensors read by body
    tag: str = ""
    attrs: tuple = ()
    layout_free: tuple = ()  # placeholders named by attrs["layout_free_placeholders"]: a hint

    @property
    def reduce_axis(self) -> tuple:
        return self.body.axis if isinstance(self.body, Reduce) else ()

    def output(self, index: int = 0) -> "Tensor":
        """The tensor this op computes (TVM's `op.output(0)`)."""
        t = _TENSOR_OF_OP.get(id(self))
        if index != 0 or t is None:
            raise TEError(f"compute {self.name} has one output, output(0)")
        return t


class Tensor:
    """The output of a placeholder or compute; `T[i, j]` reads one element."""

    __slots__ = ("op", "buffer", "__weakref__")

    def __init__(self, op, buffer: Buffer):
        self.op = op
        self.buffer = buffer
        _TENSOR_OF_BUFFER[id(buffer)] = self
        _TENSOR_OF_OP[id(op)] = self

    @property
    def shape(self) -> tuple:
        return self.buffer.shape

    @property
    def dtype(self) -> str:
        return self.buffer.dtype

    @property
    def name(self) -> str:
        return self.buffer.name

    @property
    def ndim(self) -> int:
        return len(self.buffer.shape)

    def __getitem__(self, indices) -> PrimExpr:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise TEError(f"tensor {self.name} has {self.ndim} dimension(s) {list(self.shape)}, "
                          f"but was indexed with {len(indices)}: {self.name}{list(indices)}")
        idx = []
        for d, i in enumerate(indices):
            if isinstance(i, slice):
                raise TEError(f"tensor {self.name}: slices are not supported in expressions; "
                              "index element by element inside te.compute")
            try:
                e = convert(i)
            except TypeError as err:
                raise TEError(f"tensor {self.name}: index {d} is {i!r}; {err}") from None
            if not dt.is_int(e.dtype):
                raise TEError(f"tensor {self.name}: index {d} ({e!r}) has dtype {e.dtype}; "
                              "indices must be integers (cast with .astype('int32'))")
            if isinstance(e, IntImm) and not 0 <= e.value < self.shape[d]:
                raise TEError(f"tensor {self.name}: constant index {e.value} is out of range "
                              f"for dimension {d} of extent {self.shape[d]}")
            idx.append(e)
        return BufferLoad(self.buffer, tuple(idx), self.dtype)

    def __repr__(self):
        return f"Tensor({self.name}, {list(self.shape)}, {self.dtype!r})"

    # a Tensor used as a scalar (0-d) behaves like its only element
    def __len__(self):
        return self.shape[0]


def tensor_of(buffer: Buffer) -> Tensor | None:
    return _TENSOR_OF_BUFFER.get(id(buffer))


def _shape(shape, what: str) -> tuple:
    given = shape
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    try:
        shape = None if isinstance(shape, str) else tuple(shape)
    except TypeError:
        shape = None
    if shape is None or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool)
                                for s in shape):
        raise TEError(f"{what}: shape must be a tuple of ints, got {given!r}")
    shape = tuple(int(s) for s in shape)
    if any(s < 1 for s in shape):
        raise TEError(f"{what}: every dimension must be >= 1, got {list(shape)}")
    return shape


def placeholder(shape, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor."""
    shape = _shape(shape, f"placeholder {name}")
    try:
        dtype = dt.check(dtype)
    except dt.DTypeError as e:
        raise TEError(f"placeholder {name}: {e}") from None
    return Tensor(PlaceholderOp(name), Buffer(name, shape, dtype))


def reduce_axis(dom, name: str = "rv") -> IterVar:
    """A reduction axis over `dom`: an int n (meaning [0, n)) or a pair (0, n)."""
    if isinstance(dom, int):
        lo, hi = 0, dom
    else:
        try:
            lo, hi = (int(x) for x in dom)
        except (TypeError, ValueError):
            raise TEError(f"reduce_axis {name}: dom must be (0, n) or n, got {dom!r}") from None
    if lo != 0:
        raise TEError(f"reduce_axis {name}: ranges start at 0 (got ({lo}, {hi})); "
                      f"shift the index instead, e.g. A[k + {lo}] over (0, {hi - lo})")
    if hi < 1:
        raise TEError(f"reduce_axis {name}: the range (0, {hi}) is empty")
    return IterVar(Var(name), hi, "R")


_AXIS_NAMES = "ijklmnopqrst"


def compute(shape, fcompute, name: str = "compute", tag: str = "", attrs: dict | None = None,
            dtype: str | None = None) -> Tensor:
    """out[i, j, ...] = fcompute(i, j, ...). A reduction (te.sum, te.max, ...) must be the
    outermost expression of fcompute's result."""
    shape = _shape(shape, f"compute {name}")
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and params[0].kind == inspect.Parameter.VAR_POSITIONAL:
        names = [_AXIS_NAMES[d] if d < len(_AXIS_NAMES) else f"ax{d}" for d in range(len(shape))]
    else:
        names = [p.name for p in params]
        if len(names) != len(shape):
            raise TEError(f"compute {name}: fcompute takes {len(names)} index argument(s) "
                          f"({', '.join(names)}) but the shape {list(shape)} has {len(shape)} "
                          "dimension(s)")
    axis = tuple(IterVar(Var(n), s, "S") for n, s in zip(names, shape))
    try:
        body = fcompute(*axis)
    except TEError:
        raise
    except (TypeError, ValueError, IndexError) as err:  # tir's checks: dtypes, truth values, ...
        raise TEError(f"compute {name}: {err}") from err
    try:
        body = convert(body)
    except TypeError:
        raise TEError(f"compute {name}: fcompute returned {body!r}; it must return an "
                      "expression such as A[i] * 2") from None
    if dtype is not None:
        try:
            dtype = dt.check(dtype)
        except dt.DTypeError as e:
            raise TEError(f"compute {name}: {e}") from None
        body = _cast_body(body, dtype)
    inputs = _check_body(name, body, axis)
    _check_bounds(name, body, axis)
    attrs = dict(attrs or {})
    layout_free = _layout_free(name, attrs.pop("layout_free_placeholders", ()), inputs)
    for key, value in attrs.items():
        if not isinstance(key, str) or not _plain(value):
            raise TEError(f"compute {name}: attrs[{key!r}] = {value!r:.80} is not plain data "
                          "(str, number, bool or tuples of them); block annotations must be")
    buf = Buffer(name, shape, body.dtype)
    op = ComputeOp(name, axis, body, inputs, tag, tuple(sorted(attrs.items())), layout_free)
    return Tensor(op, buf)


def _plain(value) -> bool:
    if isinstance(value, (list, tuple)):
        return all(map(_plain, value))
    return isinstance(value, (str, int, float, bool)) or value is None


def _layout_free(name: str, tensors, inputs) -> tuple:
    """attrs={"layout_free_placeholders": [B]} (Ansor's spelling): placeholders this compute
    reads whose layout the compiler may choose. Kept on the ComputeOp as a hint: a kernel
    called with the user's arrays takes them as they are (a model's constant weights are
    packed by the tuner's rewrite-layout postprocessor, see docs/tvm_names.md)."""
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    if not isinstance(tensors, (list, tuple)):
        raise TEError(f"compute {name}: layout_free_placeholders must be a list of "
                      f"placeholders, got {tensors!r:.80}")
    for t in tensors:
        if not (isinstance(t, Tensor) and isinstance(t.op, PlaceholderOp)):
            raise TEError(f"compute {name}: layout_free_placeholders lists {t!r:.80}, which is "
                          "not a te.placeholder")
        if not any(t is x for x in inputs):
            raise TEError(f"compute {name}: layout_free_placeholders lists {t.name}, which "
                          "this compute does not read")
    return tuple(tensors)


def _cast_body(body, dtype):
    if isinstance(body, Reduce):
        from ..tir.expr import Reduce as R
        return R(body.combiner, cast(body.source, dtype), body.axis, cast(body.identity, dtype),
                 dtype)
    return cast(body, dtype)


def _check_bounds(name: str, body: PrimExpr, axis: tuple) -> None:
    """TEError for a read that would reach other memory: one that may fall outside its tensor
    somewhere in the iteration space, or whose index cannot be bounded at all. Affine
    indices are bounded exactly; others (i * i, i // j, min, casts) by interval arithmetic,
    which may refuse a read that would in fact stay inside (write such an index with a
    guard). Reads under te.if_then_else are left to their guard (padding reads outside the
    tensor only where the condition is false), and indices read from memory (gathers) to
    the kernel's own checks."""
    from ..tir.arith.bound import eval_bound
    from ..tir.arith.interval import INF, const_bound
    ivs = tuple(axis) + (body.axis if isinstance(body, Reduce) else ())
    dom = {iv.var: (0, iv.extent - 1) for iv in ivs}
    guarded: set = set()

    def guard(n):
        if isinstance(n, Select):
            for side in (n.true_value, n.false_value):
                visit(side, lambda x: guarded.add(id(x)) if isinstance(x, BufferLoad) else None)

    def check(n):
        if not isinstance(n, BufferLoad) or id(n) in guarded:
            return
        for d, (index, extent) in enumerate(zip(n.indices, n.buffer.shape)):
            bound = eval_bound(index, dom)
            if bound is not None and all(isinstance(b, IntImm) for b in bound):
                lo, hi = bound[0].value, bound[1].value
            elif _reads_memory(index):
                continue  # a gather: its index is data
            else:
                lo, hi = const_bound(index, dom)
                if lo == -INF or hi == INF:
                    raise TEError(f"compute {name}: cannot bound the index {index!r} of "
                                  f"dimension {d} of {n.buffer.name} over the compute's axes, "
                                  "so the read might fall outside the tensor; build the index "
                                  "from the axes and constants with +, -, *, //, %, min and "
                                  "max, or guard the read with te.if_then_else")
            if lo < 0 or hi >= extent:
                raise TEError(f"compute {name}: {n!r} reads dimension {d} of {n.buffer.name} at "
                              f"{lo}..{hi}, outside its extent {extent} (0..{extent - 1}); fix "
                              "the index or the compute's shape, or guard the read with "
                              "te.if_then_else as padding does")

    visit(body, guard)
    visit(body, check)


def _reads_memory(e) -> bool:
    found = []
    visit(e, lambda x: found.append(x) if isinstance(x, BufferLoad) else None)
    return bool(found)


def _check_body(name: str, body: PrimExpr, axis: tuple) -> tuple:
    """Validate reductions and collect the input tensors of a compute body."""
    reduces = []
    loads = []

    def fn(n):
        if isinstance(n, Reduce):
            reduces.append(n)
        elif isinstance(n, BufferLoad):
            loads.append(n)

    visit(body, fn)
    if reduces and (not isinstance(body, Reduce) or len(reduces) > 1):
        raise TEError(f"compute {name}: a reduction must be the outermost expression of the "
                      "compute (e.g. te.sum(A[i, k] * B[k, j], axis=k)); put arithmetic on "
                      "its result into a separate te.compute stage")
    allowed = {iv.var for iv in axis}
    if isinstance(body, Reduce):
        raxes = {iv.var for iv in body.axis}
        if raxes & allowed:
            raise TEError(f"compute {name}: a spatial axis is used as a reduction axis")
        allowed |= raxes
    used = set()

    def fv(n):
        if isinstance(n, Var):
            used.add(n)

    visit(body, fv)
    stray = [v for v in used if v not in allowed]
    if stray:
        names = ", ".join(sorted(v.name for v in stray))
        raise TEError(f"compute {name}: variable(s) {names} are not axes of this compute; a "
                      "te.reduce_axis may only be used inside the te.sum/max/min that reduces "
                      "over it, in the same compute")
    inputs, seen = [], set()
    for ld in loads:
        t = tensor_of(ld.buffer)
        if t is None:
            raise TEError(f"compute {name}: reads buffer {ld.buffer.name}, which is not a tensor")
        if id(t) not in seen:
            seen.add(id(t))
            inputs.append(t)
    return tuple(inputs)
