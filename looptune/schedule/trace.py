"""Traces: the instructions a schedule executed plus the decisions of its sampling
instructions. A trace is plain data: it prints, round-trips through JSON, replays on a fresh
schedule of the same workload, and replays with a changed decision (`with_decision`)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from ..registry import Registry
from .error import ScheduleError

# 2: sample_compute_location's decision indexes the loops the consumers share (1: the legal
#    ones), and sample_tile exists
TRACE_FORMAT_VERSION = 2


class RV:
    """A random variable of a trace: a handle whose value the schedule resolves."""

    __slots__ = ("__weakref__",)
    prefix = "x"

    def __repr__(self):
        return f"{type(self).__name__}@{id(self) & 0xffff:04x}"


class BlockRV(RV):
    """A handle to a block of a schedule (stays valid while the block exists)."""

    __slots__ = ()
    prefix = "b"


class LoopRV(RV):
    """A handle to a loop of a schedule (stays valid until a primitive replaces the loop)."""

    __slots__ = ()
    prefix = "l"


class ExprRV(RV):
    """An integer chosen by a sampling instruction (a tile size, an unroll depth, ...)."""
    __slots__ = ()
    prefix = "v"


_RV_CLASSES = {"b": BlockRV, "l": LoopRV, "v": ExprRV}


@dataclass(frozen=True)
class InstructionKind:
    """How one kind of instruction applies, prints and serializes.

    `apply(sch, inputs, attrs, decision)` returns the outputs (a list), or (outputs, decision)
    for sampling kinds. In `inputs`, a name starting with '*' takes the remaining inputs as
    Python varargs (`sch.fuse(l0, l1)`); '+' takes them as one list (`factors=[...]`).
    """

    name: str
    method: str
    apply: Callable
    inputs: tuple = ()
    attrs: tuple = ()
    pure: bool = False       # changes no IR (lookups, sampling): dead if its outputs are unused
    sampling: bool = False   # has a decision
    list_outputs: bool = False  # its outputs are a list, even of one (`l0, = sch.get_loops(b)`)
    postproc: bool = False   # the marker after which postprocessing instructions follow


INSTRUCTIONS = Registry("instruction kind", error=ScheduleError)


def register_instruction(kind: InstructionKind) -> InstructionKind:
    if kind.name in INSTRUCTIONS:
        raise ValueError(f"instruction kind {kind.name} is already registered")
    return INSTRUCTIONS.add(kind.name, kind)


def instruction(name: str, method: str, *, inputs=(), attrs=(), pure=False, sampling=False,
                list_outputs=False):
    """Decorator registering `fn(sch, inputs, attrs, decision)` as instruction `name`."""
    def deco(fn):
        register_instruction(InstructionKind(name, method, fn, tuple(inputs), tuple(attrs),
                                             pure, sampling, list_outputs))
        return fn
    return deco


@dataclass(frozen=True, eq=False)
class Instruction:
    """One step of a trace: its kind, input handles and values, attributes and output handles.
    Its sampling decision, if any, is kept in the trace."""

    kind: InstructionKind
    inputs: tuple
    attrs: tuple
    outputs: tuple

    def __repr__(self):
        return _format(self, None, _RVNames(), python=False)


class _RVNames:
    def __init__(self):
        self.names: dict = {}

    def __call__(self, rv) -> str:
        n = self.names.get(rv)
        if n is None:
            n = self.names[rv] = f"{rv.prefix}{len(self.names)}"
        return n


def _value_str(v, names) -> str:
    if isinstance(v, RV):
        return names(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value_str(x, names) for x in v) + "]"
    return repr(v)


def _format(inst: Instruction, decision, names: _RVNames, *, python: bool) -> str:
    kind = inst.kind
    args = []
    inputs = list(inst.inputs)
    for i, n in enumerate(kind.inputs):
        if n.startswith("*"):  # varargs: positional in Python, a list in the trace's own form
            if python:
                args.extend((None, _value_str(x, names)) for x in inputs[i:])
            else:
                args.append((n[1:], _value_str(inputs[i:], names)))
            break
        if n.startswith("+"):  # gathered into one list argument
            args.append((n[1:], _value_str(inputs[i:], names)))
            break
        if i < len(inputs):
            args.append((n, _value_str(inputs[i], names)))
    for n, v in zip(kind.attrs, inst.attrs):
        args.append((n, _value_str(v, names)))
    if kind.sampling and decision is not None:
        args.append(("decision", _value_str(decision, names)))
    text = ", ".join(v if k is None else f"{k}={v}" for k, v in args)
    call = f"{'sch.' + kind.method if python else kind.name}({text})"
    if not inst.outputs:
        return call
    outs = ", ".join(names(o) for o in inst.outputs)
    if len(inst.outputs) == 1 and kind.list_outputs:
        outs += ","
    return f"{outs} = {call}"


class Trace:
    """An append-only list of instructions with the decisions of the sampling ones."""

    def __init__(self, insts=None, decisions=None):
        self.insts: list[Instruction] = list(insts or [])
        self.decisions: dict = dict(decisions or {})  # Instruction -> decision

    def append(self, inst: Instruction, decision=None):
        self.insts.append(inst)
        if decision is not None:
            self.decisions[inst] = decision

    def copy(self) -> "Trace":
        return Trace(self.insts, self.decisions)

    def __len__(self):
        return len(self.insts)

    def get_decision(self, inst):
        return self.decisions.get(inst)

    # ------------------------------------------------------------------ printing
    def __str__(self):
        names = _RVNames()
        return "\n".join(_format(i, self.decisions.get(i), names, python=False) for i in self.insts)

    def __repr__(self):
        return f"Trace({len(self.insts)} instructions)"

    def as_python(self) -> str:
        """Schedule code that reproduces this trace, given `sch` on the same workload."""
        names = _RVNames()
        return "\n".join(_format(i, self.decisions.get(i), names, python=True) for i in self.insts)

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict:
        names = _RVNames()
        insts, decisions = [], []
        for k, inst in enumerate(self.insts):
            inputs = [_to_json(x, names) for x in inst.inputs]
            outputs = [names(o) for o in inst.outputs]
            insts.append([inst.kind.name, inputs, [_to_json(a, names) for a in inst.attrs], outputs])
            if inst in self.decisions:
                decisions.append([k, _to_json(self.decisions[inst], names)])
        return {"version": TRACE_FORMAT_VERSION, "insts": insts, "decisions": decisions}

    def to_json_str(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    @staticmethod
    def from_json(obj) -> "Trace":
        from .error import ScheduleError

        if isinstance(obj, str):
            obj = json.loads(obj)
        if not isinstance(obj, dict) or "version" not in obj:
            raise ScheduleError("not a looptune trace (no format version)")
        if obj["version"] != TRACE_FORMAT_VERSION:
            raise ScheduleError(f"a trace of format version {obj['version']!r}; this looptune "
                                f"replays version {TRACE_FORMAT_VERSION} only: re-tune to get "
                                "records in the current format")
        rvs: dict = {}

        def rv(name: str):
            r = rvs.get(name)
            if r is None:
                cls = _RV_CLASSES.get(name[:1])
                if cls is None:
                    raise ScheduleError(f"trace JSON: bad variable name {name!r}")
                r = rvs[name] = cls()
            return r

        insts = []
        for entry in obj["insts"]:
            kind_name, inputs, attrs, outputs = entry
            kind = INSTRUCTIONS.get(kind_name)
            if kind is None:
                raise ScheduleError(f"trace JSON: unknown instruction kind {kind_name!r}")
            ins = tuple(_from_json(x, rv) for x in inputs)
            outs = tuple(rv(o) for o in outputs)
            insts.append(Instruction(kind, ins, tuple(_from_json_attr(a) for a in attrs), outs))
        decisions = {insts[k]: _from_json_attr(d) for k, d in obj["decisions"]}
        return Trace(insts, decisions)

    # ------------------------------------------------------------------ replay
    def apply_to_schedule(self, sch, *, remove_postproc: bool = False,
                          decision_provider: Callable | None = None,
                          lenient: bool = False) -> None:
        """Replay on `sch` (a fresh schedule of the same workload). `decision_provider(inst,
        inputs, attrs, decision)` may change the decision of sampling instructions.

        With `lenient`, an instruction naming a block that does not exist is skipped along
        with everything that depends on it (used to apply the trace of an anchor block to a
        fused variant of it); other refusals still raise."""
        from .error import ScheduleError

        rv_map: dict = {}
        missing: set = set()
        for inst in self.insts:
            if remove_postproc and inst.kind.postproc:
                break
            if lenient and _uses(inst.inputs, missing):
                missing.update(inst.outputs)
                continue
            inputs = tuple(map_rvs(x, rv_map) for x in inst.inputs)
            decision = self.decisions.get(inst)
            if decision_provider is not None and inst.kind.sampling:
                decision = decision_provider(inst, inputs, inst.attrs, decision)
            try:
                outputs = sch.apply_instruction(inst.kind, inputs, inst.attrs, decision)
            except ScheduleError:
                if lenient and inst.kind.name == "GetBlock":
                    missing.update(inst.outputs)
                    continue
                raise
            for old, new in zip(inst.outputs, outputs):
                rv_map[old] = new

    def with_decision(self, inst: Instruction, decision, *, remove_postproc: bool = True) -> "Trace":
        """A copy in which sampling instruction `inst` has `decision` (replay to use it)."""
        insts = []
        for i in self.insts:
            if remove_postproc and i.kind.postproc:
                break
            insts.append(i)
        if inst not in insts:
            raise ValueError("with_decision: the instruction is not part of this trace")
        decisions = {i: d for i, d in self.decisions.items() if i in set(insts)}
        decisions[inst] = decision
        return Trace(insts, decisions)

    def without_postproc(self) -> "Trace":
        insts = []
        for i in self.insts:
            if i.kind.postproc:
                break
            insts.append(i)
        kept = set(insts)
        return Trace(insts, {i: d for i, d in self.decisions.items() if i in kept})

    def structure(self) -> tuple:
        """The instructions before postprocessing, printed without decisions and with handles
        numbered in order of appearance: equal for two traces that differ only in their
        sampling decisions (a design space and every replay of it)."""
        names = _RVNames()
        steps = []
        for inst in self.insts:
            if inst.kind.postproc:
                break
            steps.append(_format(inst, None, names, python=False))
        return tuple(steps)

    def sampling_instructions(self) -> list:
        return [i for i in self.insts if i.kind.sampling]

    def simplified(self) -> "Trace":
        """Drop pure instructions whose outputs nothing uses (dead lookups and samples)."""
        used: set = set()
        keep = []
        for inst in reversed(self.insts):
            if inst.kind.pure and not any(o in used for o in inst.outputs):
                continue
            keep.append(inst)
            for x in inst.inputs:
                _collect_rvs(x, used)
        keep.reverse()
        return Trace(keep, {i: d for i, d in self.decisions.items() if i in set(keep)})


def _uses(x, rvs: set) -> bool:
    if isinstance(x, RV):
        return x in rvs
    if isinstance(x, (list, tuple)):
        return any(_uses(y, rvs) for y in x)
    return False


def _collect_rvs(x, out: set):
    if isinstance(x, RV):
        out.add(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _collect_rvs(y, out)


def map_rvs(x, rv_map):
    """`x` (an instruction input) with the handles of one trace replaced by those `rv_map`
    gives for them, looking through lists and tuples: how a replay feeds the schedule."""
    if isinstance(x, RV):
        try:
            return rv_map[x]
        except KeyError:
            from .error import ScheduleError
            raise ScheduleError(f"trace replay: {x!r} is used before it is defined") from None
    if isinstance(x, (list, tuple)):
        return type(x)(map_rvs(y, rv_map) for y in x)
    return x


def _to_json(x, names):
    if isinstance(x, RV):
        return names(x)
    if isinstance(x, (list, tuple)):
        return [_to_json(y, names) for y in x]
    if isinstance(x, str):
        return {"s": x}  # strings are quoted so they cannot be mistaken for variables
    return x


def _from_json(x, rv):
    if isinstance(x, str):
        return rv(x)
    if isinstance(x, list):
        return tuple(_from_json(y, rv) for y in x)
    if isinstance(x, dict) and "s" in x:
        return x["s"]
    return x


def _from_json_attr(x):
    if isinstance(x, list):
        return tuple(_from_json_attr(y) for y in x)
    if isinstance(x, dict) and "s" in x:
        return x["s"]
    return x
