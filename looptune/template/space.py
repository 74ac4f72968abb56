"""ConfigSpace and ConfigEntity: the `cfg` a template sees.

Run once by `task.create`, a template defines its knobs on a ConfigSpace, which collects
them (each then reads as its first value, so the template runs through). Run with a
ConfigEntity, one point of that space, the same definitions are checked against the space
and each knob reads as the entity's value. A config's index is mixed-radix over the knobs
in definition order, the first knob varying fastest:

    index == i0 + len0 * (i1 + len1 * (i2 + ...))
"""
from __future__ import annotations

import weakref
from math import prod

from ..schedule.trace import INSTRUCTIONS, Instruction, LoopRV, Trace
from .error import TemplateError
from .knob import (AnnotateSpace, KnobEntity, KnobSpace, OtherOptionSpace, ReorderSpace,
                   SplitSpace, json_value)


def _extent(name: str, loop_or_extent):
    """An int extent, or None for a loop handle (read when the knob is applied)."""
    if isinstance(loop_or_extent, LoopRV):
        return None
    extent = getattr(loop_or_extent, "extent", loop_or_extent)  # a For from sch.get(loop)
    if isinstance(extent, bool) or not isinstance(extent, int) or extent < 1:
        raise TemplateError(f"define_split {name!r}: expected a loop handle or an extent (an "
                            f"int >= 1), got {loop_or_extent!r}")
    return extent


class _Config:
    """Defining and reading knobs, shared by ConfigSpace (which collects definitions) and
    ConfigEntity (which checks them and gives its values)."""

    is_fallback = False

    def __init__(self):
        self.flop = 0.0
        self._running = False
        self._defined: dict = {}                       # name -> KnobEntity, this run
        self._emitted = weakref.WeakKeyDictionary()    # schedule -> {name: sample_knob outputs}

    # ------------------------------------------------------------------ defining
    def define_split(self, name: str, loop_or_extent, *, num_outputs: int = 2,
                     policy: str = "factors", max_factor: int | None = None, filter=None):
        """A split of a loop (a handle, or its extent) into `num_outputs` loops. `policy`:
        "factors" (exact divisors), "power2" (powers of two, with a guarded tail), "verbose"
        (both); inner factors at most `max_factor`; `filter(sizes) -> bool` drops candidates."""
        extent = _extent(name, loop_or_extent)
        key = ("split", num_outputs, policy, max_factor)
        return self._define(name, key, lambda: SplitSpace(
            name, extent, num_outputs=num_outputs, policy=policy, max_factor=max_factor,
            filter=filter), extent=extent)

    def define_knob(self, name: str, values):
        """A knob taking one of `values` (JSON values: numbers, strings, lists of them)."""
        frozen = json_value(values, f"define_knob {name!r}") if isinstance(
            values, (list, tuple)) else values
        return self._define(name, ("knob", frozen), lambda: OtherOptionSpace(name, values))

    def define_reorder(self, name: str, loops, *, policy: str = "all", candidates=None,
                       interval=None):
        """An order of `loops`: "all" orders, the orders of the loops in `interval` (start,
        end) with the others in place, the given `candidates` (lists of the loops), or
        "identity"."""
        def make():
            return ReorderSpace(name, loops, policy=policy, candidates=candidates,
                                interval=interval)
        n = len(loops) if isinstance(loops, (list, tuple)) else 0
        key = ("reorder", n, policy, tuple(interval or ()),
               make().candidates if policy == "candidate" else ())
        return self._define(name, key, make)

    def define_annotate(self, name: str, loops, *, policy: str):
        """Unroll / vectorize choices for `loops`: "try_unroll", "try_vec", "try_unroll_vec"."""
        n = len(loops) if isinstance(loops, (list, tuple)) else 0
        return self._define(name, ("annotate", n, policy),
                            lambda: AnnotateSpace(name, loops, policy=policy))

    def add_flop(self, flop: float) -> None:
        """Floating-point operations of the task (GFLOP/s in progress and best_flops); by
        default they are counted from the workload."""
        self.flop += float(flop)

    def _define(self, name, key, make, extent=None) -> KnobEntity:
        raise NotImplementedError

    # ------------------------------------------------------------------ reading
    def __getitem__(self, name: str) -> KnobEntity:
        ent = self._defined.get(name)
        if ent is not None:
            return ent
        if self._running:
            raise TemplateError(f"no knob {name!r} is defined at this point; define it "
                                f"(cfg.define_split / define_knob / define_reorder / "
                                f"define_annotate) before using cfg[{name!r}]. Defined so far: "
                                f"{', '.join(self._defined) or 'none'}")
        return self._lookup(name)

    def _lookup(self, name):
        raise TemplateError(f"no knob {name!r}")

    # ------------------------------------------------------------------ a template run
    def _begin(self) -> None:
        self._running = True
        self._defined = {}
        self._emitted = weakref.WeakKeyDictionary()

    def _emit(self, sch, ent: KnobEntity) -> list:
        per = self._emitted.setdefault(sch, {})
        if ent.name not in per:
            per[ent.name] = sch.sample_knob(ent.name, ent.space.candidates, decision=ent.index)
        return per[ent.name]

    def _finish(self, sch) -> None:
        """After the template returned `sch`: every knob is in its trace as a sample_knob
        instruction (those only read with `.val` are put in front), so that the trace says
        which config it is."""
        self._running = False
        pending = [e.name for e in self._defined.values()
                   if isinstance(e.space, SplitSpace) and not e.space.resolved]
        if pending:
            raise TemplateError(f"split knobs {pending} were defined with a loop handle but never "
                                "applied, so their extent is unknown; pass the extent instead")
        emitted = self._emitted.get(sch, {})
        kind = INSTRUCTIONS["SampleKnob"]
        front, decisions = [], {}
        for ent in self._defined.values():
            if ent.name in emitted:
                continue
            attrs = (ent.name, ent.space.candidates)
            outputs, decision = kind.apply(sch, (), attrs, ent.index)
            inst = Instruction(kind, (), attrs, tuple(outputs))
            front.append(inst)
            decisions[inst] = decision
        if front:
            sch.trace = Trace(front + sch.trace.insts, {**decisions, **sch.trace.decisions})


class ConfigSpace(_Config):
    """The knobs of a template (`space_map`, in definition order) and the configs they span."""

    def __init__(self):
        super().__init__()
        self.space_map: dict = {}   # name -> KnobSpace
        self._frozen = False

    def _define(self, name, key, make, extent=None) -> KnobEntity:
        if name in self._defined:
            raise TemplateError(f"knob {name!r} is defined twice in one run of the template; "
                                "give each knob its own name")
        space = self.space_map.get(name)
        if space is None:
            if self._frozen:
                raise TemplateError(f"knob {name!r} is defined after the config space was "
                                    "collected (task.create); a template defines the same knobs "
                                    "on every run")
            space = make()
            space.key = key
            self.space_map[name] = space
        ent = space.entity_class(space, 0, self)
        self._defined[name] = ent
        return ent

    def __getitem__(self, name: str):
        """While the template runs, the knob's entity (its first value); after, its space."""
        return super().__getitem__(name) if self._running else self._lookup(name)

    def _lookup(self, name) -> KnobSpace:
        space = self.space_map.get(name)
        if space is None:
            raise TemplateError(f"the config space has no knob {name!r}; its knobs: "
                                f"{', '.join(self.space_map) or 'none'}")
        return space

    def freeze(self) -> None:
        self._frozen = True
        self._len = prod(len(s) for s in self.space_map.values())

    # ------------------------------------------------------------------ indices
    def __len__(self) -> int:
        if self._frozen:
            return self._len
        return prod(len(s) for s in self.space_map.values())

    @property
    def dims(self) -> list:
        return [len(s) for s in self.space_map.values()]

    def subindices(self, index: int) -> dict:
        """name -> index of the knob's value, for config `index`."""
        self._check(index)
        out = {}
        for name, s in self.space_map.items():
            index, out[name] = divmod(index, len(s))
        return out

    def index_of(self, subindices) -> int:
        """The config index of per-knob value indices (a dict by name, or a list in order)."""
        if isinstance(subindices, dict):
            missing = set(self.space_map) - set(subindices)
            if missing or len(subindices) != len(self.space_map):
                raise TemplateError(f"a config needs a value for each knob "
                                    f"({', '.join(self.space_map)}), got {sorted(subindices)}")
            subindices = [subindices[n] for n in self.space_map]
        index, scale = 0, 1
        for i, s in zip(subindices, self.space_map.values()):
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(s):
                raise TemplateError(f"knob {s.name!r} has {len(s)} values; index {i!r} is out "
                                    "of range")
            index += i * scale
            scale *= len(s)
        return index

    def get(self, index: int) -> "ConfigEntity":
        return ConfigEntity(self, index)

    def from_values(self, values: dict) -> "ConfigEntity":
        """The config with these knob values ({name: value})."""
        unknown = set(values) - set(self.space_map)
        if unknown:
            raise TemplateError(f"the config space has no knob {sorted(unknown)}; its knobs: "
                                f"{', '.join(self.space_map)}")
        return self.get(self.index_of({n: s.index_of(values[n]) if n in values else None
                                       for n, s in self.space_map.items()}))

    def from_json(self, obj: dict) -> "ConfigEntity":
        """The config a ConfigEntity.to_json() describes (by its values, so that a config
        of the same template survives knobs being reordered)."""
        if not isinstance(obj, dict) or not isinstance(obj.get("entity"), dict):
            raise TemplateError(f"not a config (ConfigEntity.to_json()): {obj!r}")
        return self.from_values(obj["entity"])

    def _check(self, index) -> None:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self):
            raise TemplateError(f"config index {index!r} is out of range: the space has "
                                f"{len(self)} configs (0 to {len(self) - 1})")

    # ------------------------------------------------------------------ for tuners
    def neighbors(self, index: int) -> list:
        """Configs that differ from `index` by one step of one knob (KnobSpace.neighbors)."""
        subs = self.subindices(index)
        out, scale = [], 1
        for name, s in self.space_map.items():
            for j in s.near(subs[name]):
                out.append(index + (j - subs[name]) * scale)
            scale *= len(s)
        return out

    def features(self, index: int) -> list:
        """The knob values of config `index` as numbers (log2 for split factors)."""
        subs = self.subindices(index)
        return [x for name, s in self.space_map.items() for x in s.features(subs[name])]

    def __iter__(self):
        return (self.get(i) for i in range(len(self)))

    def __repr__(self):
        return f"ConfigSpace({len(self.space_map)} knobs, {len(self)} configs)"

    def __str__(self):
        lines = [f"ConfigSpace (len={len(self)}, space_map="]
        lines += [f"  {i:3d} {name}: {s.describe()}" for i, (name, s) in
                  enumerate(self.space_map.items())]
        return "\n".join(lines + [")"])


class ConfigEntity(_Config):
    """One config of a space: its `index` and a value for each knob (`cfg[name].val`)."""

    def __init__(self, space: ConfigSpace, index: int):
        super().__init__()
        self.space = space
        self.index = index
        self._sub = space.subindices(index)
        self.flop = space.flop

    def _define(self, name, key, make, extent=None) -> KnobEntity:
        space = self.space.space_map.get(name)
        if space is None:
            raise TemplateError(f"the template defines knob {name!r}, which its config space "
                                "(collected by task.create) does not have; a template must "
                                "define the same knobs on every run")
        if space.key != key:
            raise TemplateError(f"knob {name!r} is defined differently from when the config "
                                f"space was collected: {key} instead of {space.key}")
        if extent is not None and isinstance(space, SplitSpace) and space.resolved \
                and extent != space.extent:
            raise TemplateError(f"split knob {name!r} is defined for extent {extent}, but the "
                                f"config space has it for extent {space.extent}")
        if name in self._defined:
            raise TemplateError(f"knob {name!r} is defined twice in one run of the template")
        ent = space.entity_class(space, self._sub[name], self)
        self._defined[name] = ent
        return ent

    def _lookup(self, name) -> KnobEntity:
        space = self.space.space_map.get(name)
        if space is None:
            raise TemplateError(f"the config has no knob {name!r}; its knobs: "
                                f"{', '.join(self.space.space_map) or 'none'}")
        return space.entity_class(space, self._sub[name], self)

    def _finish(self, sch) -> None:
        missing = [n for n in self.space.space_map if n not in self._defined]
        if missing:
            self._running = False
            raise TemplateError(f"the template did not define knobs {missing} with config "
                                f"#{self.index}; a template must define the same knobs on "
                                "every run")
        super()._finish(sch)

    @property
    def values(self) -> dict:
        return {n: self[n].val for n in self.space.space_map}

    def get_flatten_feature(self):
        import numpy as np
        return np.asarray(self.space.features(self.index), dtype=np.float32)

    def to_json(self) -> dict:
        return {"index": self.index, "entity": self.values}

    def __eq__(self, other):
        return isinstance(other, ConfigEntity) and other.space is self.space \
            and other.index == self.index

    def __hash__(self):
        return hash((id(self.space), self.index))

    def __repr__(self):
        knobs = ", ".join(f"{n}={v!r}" for n, v in self.values.items())
        fb = " (fallback)" if self.is_fallback else ""
        return f"#{self.index}{fb} {knobs}"

    __str__ = __repr__


class FallbackConfigEntity(ConfigEntity):
    """The config a template runs with where no record exists (the space's first config,
    unless the template sets others with `cfg.fallback(name, value)` when `is_fallback`)."""

    is_fallback = True

    def fallback(self, name: str, value) -> None:
        """Use `value` for knob `name` in this fallback config (a value the knob has)."""
        space = self.space.space_map.get(name)
        if space is None:
            raise TemplateError(f"the config space has no knob {name!r}")
        self._sub[name] = space.index_of(value)
        self.index = self.space.index_of(self._sub)
        ent = self._defined.get(name)
        if ent is not None:
            ent.index = self._sub[name]


def config_of_trace(space: ConfigSpace, trace) -> ConfigEntity | None:
    """The config whose knobs (sample_knob instructions) `trace` holds, or None if it is not
    a trace of a config of this space (another template, tune_tir's records, a space whose
    knobs changed)."""
    found = {}
    for inst in trace.insts:
        if inst.kind.name == "SampleKnob":
            found[inst.attrs[0]] = (inst.attrs[1], trace.decisions.get(inst))
    if set(found) != set(space.space_map):
        return None
    subs = {}
    for name, s in space.space_map.items():
        candidates, decision = found[name]
        if candidates != s.candidates or not isinstance(decision, int):
            return None
        subs[name] = decision
    return space.get(space.index_of(subs))
