"""TVM's tensor-expression schedule spelling over looptune's Schedule, so that AutoTVM
templates written for TVM run as they are:

    s = te.create_schedule(C.op)           s[C].split(C.op.axis[0], factor=8) -> (outer, inner)
    s[C].reorder(...), fuse, vectorize, unroll, parallel, pragma, compute_inline, compute_at

`s.sch` is the looptune Schedule every call is made on (its trace is the record); a te axis
(`C.op.axis[i]`, `C.op.reduce_axis[i]`) stands for the loop create_prim_func made of it.
The function's parameters are the placeholders in the order the outputs first read them,
then the outputs: the order a template returns its tensors in (checked by `check_args`).
"""
from __future__ import annotations

from ..schedule import Schedule, ScheduleError
from ..schedule.trace import LoopRV
from .create import _topo, _unique, create_prim_func
from .tensor import ComputeOp, PlaceholderOp, TEError, Tensor

# pragma(axis, key, value) keys that are block annotations of looptune's lowering
_PRAGMAS = ("auto_unroll_max_step", "unroll_explicit")


def create_schedule(ops) -> "TESchedule":
    """A TVM-style schedule of the computation producing `ops` (an op, a tensor, or a list)."""
    ops = ops if isinstance(ops, (list, tuple)) else [ops]
    outputs = []
    for op in ops:
        t = op if isinstance(op, Tensor) else getattr(op, "output", lambda i: None)(0)
        if not isinstance(t, Tensor) or not isinstance(t.op, ComputeOp):
            raise TEError(f"create_schedule takes compute ops or tensors (C.op), got {op!r:.80}")
        outputs.append(t)
    return TESchedule(outputs)


class TESchedule:
    """`s = te.create_schedule(C.op)`: `s[C]` is C's stage, whose primitives are recorded on
    `s.sch` (a looptune Schedule over the function of the inputs and outputs)."""

    def __init__(self, outputs):
        order = _topo(outputs)
        inputs = [t for t in order if isinstance(t.op, PlaceholderOp)]
        self.tensors = inputs + list(outputs)
        self.func = create_prim_func(self.tensors)
        self.sch = Schedule(self.func)
        self._loops = {}  # id(te IterVar) -> LoopRV of its loop
        self._stages = {}
        used: set = set()
        for t in _topo(self.tensors):  # create_prim_func's order and block names
            if isinstance(t.op, ComputeOp):
                stage = Stage(self, t, _unique(t.op.name, used))
                self._stages[id(t.op)] = stage
                axes = list(t.op.axis) + list(t.op.reduce_axis)
                for iv, loop in zip(axes, self.sch.get_loops(stage.block)):
                    self._loops[id(iv)] = loop

    def __getitem__(self, tensor) -> "Stage":
        op = tensor.op if isinstance(tensor, Tensor) else tensor
        stage = self._stages.get(id(op))
        if stage is None:
            raise TEError(f"s[{getattr(op, 'name', op)!r}]: not a compute stage of this "
                          "schedule (placeholders have no stage)")
        return stage

    def loop(self, axis) -> LoopRV:
        """The loop a te axis or an earlier split/fuse result stands for."""
        if isinstance(axis, LoopRV):
            return axis
        loop = self._loops.get(id(axis))
        if loop is None:
            raise TEError(f"{axis!r:.80} is not an axis of this schedule; use C.op.axis[i], "
                          "C.op.reduce_axis[i] or what split / fuse returned")
        return loop

    def check_args(self, tensors) -> None:
        """TEError unless `tensors` are the function's parameters in order."""
        if len(tensors) != len(self.tensors) or any(a is not b for a, b in
                                                    zip(tensors, self.tensors)):
            want = ", ".join(t.name for t in self.tensors)
            raise TEError(f"the tensors ({', '.join(getattr(t, 'name', '?') for t in tensors)}) "
                          f"are not this schedule's parameters in order ({want}); return them "
                          "as inputs in the order the computation first reads them, then outputs")


class Stage:
    """`s[C]`: the block computing C, scheduled through s.sch."""

    def __init__(self, owner: TESchedule, tensor: Tensor, block_name: str):
        self.owner = owner
        self.tensor = tensor
        self.op = tensor.op
        self.block = owner.sch.get_block(block_name)

    @property
    def sch(self) -> Schedule:
        return self.owner.sch

    def split(self, parent, factor=None, nparts=None):
        """(outer, inner) with inner of `factor` iterations, or outer of `nparts`."""
        if (factor is None) == (nparts is None):
            raise TEError("split takes factor= or nparts=, one of them")
        factors = [None, factor] if nparts is None else [nparts, None]
        outer, inner = self.sch.split(self.owner.loop(parent), factors)
        return outer, inner

    def tile(self, x_parent, y_parent, x_factor, y_factor):
        xo, xi = self.split(x_parent, factor=x_factor)
        yo, yi = self.split(y_parent, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def reorder(self, *axes) -> None:
        self.sch.reorder(*[self.owner.loop(a) for a in axes])

    def fuse(self, *axes) -> LoopRV:
        return self.sch.fuse(*[self.owner.loop(a) for a in axes])

    def vectorize(self, axis) -> None:
        self.sch.vectorize(self.owner.loop(axis))

    def unroll(self, axis) -> None:
        self.sch.unroll(self.owner.loop(axis))

    def parallel(self, axis) -> None:
        self.sch.parallel(self.owner.loop(axis))

    def pragma(self, axis, key: str, value=1) -> None:
        """auto_unroll_max_step and unroll_explicit: annotations of the stage's block (they
        govern every loop of it, whichever `axis` names)."""
        if key not in _PRAGMAS:
            raise ScheduleError(f"pragma {key!r} is not one looptune's lowering reads; it reads "
                                f"{', '.join(_PRAGMAS)}")
        self.owner.loop(axis)
        self.sch.annotate(self.block, f"pragma_{key}", value)

    def compute_inline(self) -> None:
        self.sch.compute_inline(self.block)

    def compute_at(self, parent: "Stage", axis) -> None:
        self.sch.compute_at(self.block, self.owner.loop(axis))
