"""The static memory plan of a compiled model: where every intermediate tensor lives.

Kernels run in order; each intermediate is live from the kernel that writes it to the last
kernel that reads it. Intermediates whose lives do not overlap share bytes of one arena
(first fit, 64-byte aligned); weights are packed into one read-only blob.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..runtime.limits import memory_problem, tensor_bytes
from ..runtime.ndarray import pack_array
from ..schedule.primitives.layout import PACKED
from .executor import ModelError

ALIGN = 64


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def nbytes(v) -> int:
    return math.prod(v.shape) * np.dtype(v.dtype).itemsize  # exact: numpy's int64 would wrap


def check_fits(graph, groups: list) -> None:
    """ModelError, before anything compiles, if a tensor of the model cannot exist (a size
    beyond int64) or its inputs, outputs, arena of intermediates and weights cannot all fit
    in this machine's memory (runtime.limits)."""
    what = f"the model {graph.name}"
    consts = {}
    for g in groups:
        for v in (*g.inputs, g.output):
            _, problem = tensor_bytes(v.name, v.shape, v.dtype)
            if problem:
                raise ModelError(f"{what}: {problem}")
            if v.is_const:
                consts[id(v)] = v
    steps = [([_source_of(v) for v in g.inputs], g.output) for g in groups]
    _, arena_bytes = plan_arena(steps, {id(_source_of(v)) for v in graph.outputs})
    problem = memory_problem(what, [(v.name, v.shape, v.dtype)
                                    for v in (*graph.inputs, *graph.outputs)],
                             extra=[("the arena of intermediates", arena_bytes),
                                    ("the weights", sum(map(nbytes, consts.values())))])
    if problem:
        raise ModelError(problem)


def plan_arena(steps: list, outputs: set) -> tuple[dict, int]:
    """steps: per kernel (inputs, output) Values in run order. Returns ({id(value): offset}
    for the intermediates (values written by a kernel that are not in `outputs`), arena
    bytes)."""
    last_use: dict = {}
    for i, (ins, _) in enumerate(steps):
        for v in ins:
            last_use[id(v)] = i
    live: list = []      # (offset, size, last step)
    offsets: dict = {}
    total = 0
    for i, (_, out) in enumerate(steps):
        live = [x for x in live if x[2] >= i]  # freed once their last reader ran
        if id(out) in outputs:
            continue
        size = _aligned(max(nbytes(out), 1))
        end = last_use.get(id(out), i)
        offset, prev_end = 0, 0
        for off, sz, _ in sorted(live):
            if off - prev_end >= size:
                break
            prev_end = max(prev_end, off + sz)
        offset = prev_end
        offsets[id(out)] = offset
        live.append((offset, size, end))
        total = max(total, offset + size)
    return offsets, total


def pack_weights(constants: list) -> tuple[dict, bytes]:
    """({key: offset}, the blob) for (key, numpy array) pairs, each 64-byte aligned."""
    offsets, parts, pos = {}, [], 0
    for key, a in constants:
        data = np.ascontiguousarray(a).tobytes()
        offsets[key] = pos
        pad = _aligned(len(data)) - len(data)
        parts.append(data + b"\0" * pad)
        pos += len(data) + pad
    return offsets, b"".join(parts)


def _source_of(view):
    """The value whose bytes a chain of views (reshapes) shows."""
    from .op import get_graph_op
    while view.producer is not None and get_graph_op(view.producer.op).kind == "view":
        view = view.producer.inputs[0]
    return view


@dataclasses.dataclass
class MemoryPlan:
    """Where each value of a compiled model lives: the caller's input and output arrays (by
    argument slot), one arena of intermediates (by offset), one blob of weights (by offset
    per layout), and the outputs that copy another value."""
    steps: list  # (input values, output value) per group, views resolved to their source
    out_slots: dict  # id(value) -> argument slot (inputs first, then outputs)
    in_slot: dict  # id(value) -> argument slot
    copies: list  # (output index, source value)
    arena: dict  # id(value) -> byte offset
    arena_bytes: int
    weight_offsets: dict  # (id(value), packing factor) -> byte offset
    blob: bytes


def plan_memory(graph, groups: list, kernels: dict) -> MemoryPlan:
    """The MemoryPlan of the groups in order; `kernels` maps id(group) to its scheduled
    function (whose "packed_params" say which constants it takes packed)."""
    n_in = len(graph.inputs)
    out_slots = {}
    copies = []  # (output index, source value): outputs another output or input already holds
    for j, v in enumerate(graph.outputs):
        src = _source_of(v)
        if src.producer is not None and id(src) not in out_slots:
            out_slots[id(src)] = n_in + j
        else:
            copies.append((j, src))
    steps = [([_source_of(v) for v in g.inputs], g.output) for g in groups]
    arena, arena_bytes = plan_arena(steps, set(out_slots))
    # constants, each in the layout its kernel reads (schedule.pack_layout), once per layout
    constants, seen = [], set()

    def use_const(v, factor: int):
        if (id(v), factor) not in seen:
            seen.add((id(v), factor))
            data = np.asarray(v.data, dtype=v.dtype)
            constants.append(((id(v), factor), pack_array(data, factor) if factor else data))

    for g, (ins, _) in zip(groups, steps):
        packed = dict(kernels[id(g)].attr(PACKED, ()))
        for i, v in enumerate(ins):
            if v.is_const:
                use_const(v, packed.get(i, 0))
    for _, src in copies:
        if src.is_const:
            use_const(src, 0)
    woff, blob = pack_weights(constants)
    in_slot = {id(v): i for i, v in enumerate(graph.inputs)}
    return MemoryPlan(steps, out_slots, in_slot, copies, arena, arena_bytes, woff, blob)
