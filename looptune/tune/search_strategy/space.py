"""Points of a design space that mutate cheaply. A point is a design-space trace replayed with
some decisions; it keeps a snapshot of the schedule before every sampling instruction, so a
changed decision replays from there instead of from the unscheduled function."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...schedule import Checkpoint, Schedule, ScheduleError, Trace
from ...codegen.passes.prefetch import PREFETCH
from ...schedule.trace import map_rvs
from ...tir.structural import structural_hash
from ..schedule_rule.parallel_vectorize_unroll import PARALLEL
from .base import MeasureCandidate

UNROLL = "pragma_auto_unroll_max_step"


class DesignSpace:
    """A design-space trace (no postprocessing part) and what each sampling instruction
    decides: "tile", "compute_location", "unroll", "parallel", "prefetch", "categorical" or
    "knob" (a template's knob, kept as it is)."""

    def __init__(self, trace: Trace, *, name: str = ""):
        self.trace = trace.without_postproc()
        self.insts = self.trace.insts
        self.name = name
        self.tags: dict = {}  # position of a sampling instruction -> what it decides
        self.structure = self.trace.structure()
        for pos, inst in enumerate(self.insts):
            if inst.kind.sampling:
                self.tags[pos] = self._tag(pos, inst)

    def _tag(self, pos: int, inst) -> str:
        name = inst.kind.name
        if name in ("SamplePerfectTile", "SampleTile"):
            return "tile"
        if name == "SampleComputeLocation":
            return "compute_location"
        if name == "SampleKnob":  # a template's config: no mutator changes it
            return "knob"
        out = inst.outputs[0] if inst.outputs else None
        for later in self.insts[pos + 1:]:
            if later.kind.name == "Annotate" and out in later.inputs:
                key = later.attrs[0]
                return {UNROLL: "unroll", PARALLEL: "parallel",
                        PREFETCH: "prefetch"}.get(key, "categorical")
        return "categorical"

    def decisions_of(self, trace: Trace) -> dict:
        """position -> decision, for a trace with this space's instructions (the space's own,
        or a replay of it)."""
        return {pos: trace.decisions.get(trace.insts[pos]) for pos in self.tags
                if pos < len(trace.insts)}


@dataclass(eq=False)
class Snapshot:
    """Where a replay can restart: the schedule before one sampling instruction and the map from
    the space trace's handles to that schedule's."""

    checkpoint: Checkpoint  # the schedule before the sampling instruction
    rv_map: dict            # space-trace handle -> this schedule's handle


@dataclass(eq=False)
class Point:
    """A design space replayed with one set of decisions: what mutators read (`decisions`,
    `info`, `space`) and what the search measures (`candidate`)."""

    space: DesignSpace
    sch: Schedule                       # the replayed schedule, before postprocessing
    decisions: dict                     # position -> decision
    info: dict                          # position -> what a mutator needs (loop extent, ...)
    snapshots: dict = field(repr=False)  # position -> Snapshot
    candidate: MeasureCandidate | None = None  # postprocessed; None if a postproc refused it


def replay(space: DesignSpace, func, seed: int, *, decisions: dict | None = None,
           base: Point | None = None, start: int = 0) -> Point:
    """Replay `space` with `decisions` (missing ones are sampled afresh). With `base`, start
    from its snapshot at position `start` (a sampling instruction) instead of from scratch.
    Raises ScheduleError if a decision no longer fits."""
    decisions = dict(decisions or {})
    if base is None or start == 0:
        sch = Schedule(func, seed=seed)
        rv_map, start = {}, 0
    else:
        snap = base.snapshots[start]
        sch = base.sch.rewind(snap.checkpoint, seed=seed)
        rv_map = dict(snap.rv_map)
    snapshots = {p: s for p, s in base.snapshots.items() if p < start} if base else {}
    info = {p: v for p, v in base.info.items() if p < start} if base else {}
    out_decisions = {p: d for p, d in (base.decisions.items() if base else ()) if p < start}
    for pos in range(start, len(space.insts)):
        inst = space.insts[pos]
        inputs = tuple(map_rvs(x, rv_map) for x in inst.inputs)
        decision = None
        if inst.kind.sampling:
            snapshots[pos] = Snapshot(sch.checkpoint(), dict(rv_map))
            decision = decisions.get(pos)
            info[pos] = _info(sch, inst, inputs)
        outputs = sch.apply_instruction(inst.kind, inputs, inst.attrs, decision)
        if inst.kind.sampling:
            out_decisions[pos] = sch.trace.decisions[sch.trace.insts[-1]]
        for old, new in zip(inst.outputs, outputs):
            rv_map[old] = new
    return Point(space, sch, out_decisions, info, snapshots)


def _info(sch, inst, inputs):
    """What a mutator needs to propose a new decision for this instruction."""
    name = inst.kind.name
    if name in ("SamplePerfectTile", "SampleTile"):
        return sch.get(inputs[0]).extent
    if name == "SampleComputeLocation":
        return len(sch.compute_locations(inputs[0]))
    if name == "SampleCategorical":
        return len(inst.attrs[0])
    return None


def finish(sch: Schedule, postprocs) -> Schedule | None:
    """A postprocessed copy of `sch`, or None if a postprocessor refuses it."""
    out = sch.copy()
    out.enter_postproc()
    for p in postprocs:
        try:
            if not p.apply(out):
                return None
        except ScheduleError:
            return None
    return out


def finish_point(point: Point, postprocs) -> Point:
    done = finish(point.sch, postprocs)
    if done is not None:
        point.candidate = MeasureCandidate(done, structural_hash(done.func))
    return point
