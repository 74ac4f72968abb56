"""Shrink a failing trace: drop instructions one at a time while the failure persists.

Dropping an instruction also drops every later one that uses its outputs (a split's loops
are gone with the split), so each attempt is a trace that can replay; one the schedule
refuses simply does not fail."""
from __future__ import annotations

from typing import Callable

from ..schedule import RV, Trace


def _rvs(x, out: set) -> set:
    if isinstance(x, RV):
        out.add(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _rvs(y, out)
    return out


def without(trace: Trace, index: int) -> Trace:
    """`trace` without instruction `index` and the instructions that depend on it."""
    gone = set(trace.insts[index].outputs)
    keep = []
    for k, inst in enumerate(trace.insts):
        if k == index:
            continue
        if k > index and _rvs(inst.inputs, set()) & gone:
            gone.update(inst.outputs)
            continue
        keep.append(inst)
    return Trace(keep, {i: d for i, d in trace.decisions.items() if i in set(keep)})


def simplified(trace: Trace) -> Trace:
    """Drop lookups and samples whose outputs nothing uses. Unlike Trace.simplified, keep an
    instruction without outputs: the last one may be a lookup recorded as it failed."""
    used: set = set()
    keep = []
    for inst in reversed(trace.insts):
        if inst.kind.pure and inst.outputs and not any(o in used for o in inst.outputs):
            continue
        keep.append(inst)
        _rvs(inst.inputs, used)
    keep.reverse()
    return Trace(keep, {i: d for i, d in trace.decisions.items() if i in set(keep)})


def shrink(trace: Trace, fails: Callable[[Trace], bool], *, max_checks: int = 400) -> Trace:
    """A shorter trace on which `fails` still holds (`fails(trace)` itself is assumed): drop
    each instruction in turn, last first, keeping every drop after which `fails` holds, and
    repeat until a whole pass drops nothing or `max_checks` calls of `fails` are spent."""
    checks = 0
    simpler = simplified(trace)
    if len(simpler) < len(trace) and fails(simpler):
        trace = simpler
    checks += 1
    changed = True
    while changed and checks < max_checks:
        changed = False
        k = len(trace) - 1
        while k >= 0 and checks < max_checks:
            candidate = simplified(without(trace, k))
            checks += 1
            if fails(candidate):
                trace, changed = candidate, True
            k = min(k - 1, len(trace) - 1)
    return trace
