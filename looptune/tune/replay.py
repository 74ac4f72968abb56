"""Applying a tuning record to a function: `replay(record, func)`.

A record's trace addresses blocks by name (`GetBlock("matmul")`), the names of the workload
it was tuned on. Another function may compute the same thing in the same loops under other
tensor and block names (a model's fused kernel, a template with its own names): the two are
structurally equal up to names, so their blocks correspond in traversal order, before and
after every instruction. The trace then replays on the record's workload and on `func` in
lockstep, each `GetBlock` taking the block at the same position (blocks a schedule creates,
named after buffers - `C_local` - included). Every place that applies a record calls this.
"""
from __future__ import annotations

from ..schedule import Schedule, ScheduleError, Trace
from ..schedule.trace import map_rvs
from ..tir.structural import canonical

_SHAPES: dict = {}  # id(func) -> (func, canonical text, the same blind to block names, names)


def _shape(func) -> tuple:
    """func's structure with and without block names, and the names a trace can depend on
    (its printed body: block and buffer names, which cache blocks are named after)."""
    hit = _SHAPES.get(id(func))
    if hit is None or hit[0] is not func:
        if len(_SHAPES) > 256:
            _SHAPES.clear()
        body = func.script().split("\n", 1)[-1]  # not the signature: the function's own name
        hit = _SHAPES[id(func)] = (func, canonical(func), canonical(func, block_names=False),
                                   body)
    return hit


def replay(record_or_trace, func, *, workload_func=None, lenient: bool = False) -> Schedule:
    """A schedule of `func` with the trace of a TuningRecord (made on its workload's
    function) or of a Trace made on `workload_func` (None: on func itself) replayed.

    Raises ScheduleError when an instruction refuses, or when `workload_func` does not compute
    what `func` computes in the same loops. With `lenient` (a database matching by anchor
    block), a structurally different `func` - a fused variant of the workload - gets the trace
    by block name instead, skipping what names a block it does not have."""
    if isinstance(record_or_trace, Trace):
        trace = record_or_trace
    else:
        trace = record_or_trace.trace
        if workload_func is None:
            workload_func = record_or_trace.workload.func
    sch = Schedule(func, seed=0)
    if workload_func is None or workload_func is func:
        trace.apply_to_schedule(sch, lenient=lenient)
        return sch
    (_, theirs, theirs_blind, their_names), (_, mine, mine_blind, my_names) = (
        _shape(workload_func), _shape(func))
    if theirs == mine and their_names == my_names:  # the same names: replay as it is
        trace.apply_to_schedule(sch, lenient=lenient)
    elif theirs_blind == mine_blind:
        _replay_mapped(trace, Schedule(workload_func, seed=0), sch)
    elif lenient:
        trace.apply_to_schedule(sch, lenient=True)
    else:
        raise ScheduleError(f"the record was tuned on {workload_func.name}, which does not compute "
                            f"what {func.name} computes in the same loops (their structures "
                            "differ, not just their names); tune this function itself")
    return sch


def _replay_mapped(trace: Trace, theirs: Schedule, mine: Schedule) -> None:
    """Replay `trace` (made on theirs' function) on both schedules at once; each GetBlock
    takes, in `mine`, the block at the position the named block has in `theirs`."""
    rv_theirs: dict = {}
    rv_mine: dict = {}
    for inst in trace.insts:
        kind, attrs = inst.kind, inst.attrs
        out_theirs = theirs.apply_instruction(
            kind, tuple(map_rvs(x, rv_theirs) for x in inst.inputs), attrs,
            trace.decisions.get(inst))
        decision = theirs.trace.decisions.get(theirs.trace.insts[-1])
        if kind.name == "GetBlock":
            attrs = (_corresponding_block(attrs[0], theirs, mine),)
        out_mine = mine.apply_instruction(
            kind, tuple(map_rvs(x, rv_mine) for x in inst.inputs), attrs, decision)
        rv_theirs.update(zip(inst.outputs, out_theirs))
        rv_mine.update(zip(inst.outputs, out_mine))


def _corresponding_block(name: str, theirs: Schedule, mine: Schedule) -> str:
    their_blocks = theirs.block_names()
    my_blocks = mine.block_names()
    if len(their_blocks) != len(my_blocks):  # cannot happen for equal structures; say so
        raise ScheduleError(f"replaying a record on {mine.original.name}: its schedule has "
                            f"{len(my_blocks)} blocks where the record's workload has "
                            f"{len(their_blocks)}; the two no longer correspond")
    return my_blocks[their_blocks.index(name)]
