"""Knobs: the named choices a template defines. A knob's space is a list of candidate values
(JSON values: numbers, strings, lists of them); an entity is one of them. Applied to a
schedule, an entity is one `sample_knob` instruction (decision: the candidate's index) plus
the ordinary primitives it stands for (split, reorder, unroll / vectorize).

    split     (outer, f1, .., fn-1)    loop == ((outer_i * f1 + i1) * f2 + i2) ...
    knob      any of the given values
    reorder   a permutation of the given loops
    annotate  "none" | "unroll" | "vec" per loop
"""
from __future__ import annotations

import itertools
import math
from math import prod

from ..schedule.primitives.sampling import divisors, prime_factors
from ..schedule.trace import BlockRV, LoopRV
from ..te import Tensor, TESchedule
from .error import TemplateError

SPLIT_POLICIES = ("factors", "power2", "verbose")
REORDER_POLICIES = ("all", "interval", "candidate", "identity")
ANNOTATE_POLICIES = ("try_unroll", "try_vec", "try_unroll_vec")
ANNOTATIONS = ("none", "unroll", "vec")
MAX_REORDER_LOOPS = 8  # 8! = 40320 orders


def json_value(value, where: str):
    """`value` as a knob candidate: JSON scalars, lists as tuples; TemplateError otherwise."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TemplateError(f"{where}: {value!r} is not a finite number")
        return value
    if isinstance(value, (list, tuple)):
        return tuple(json_value(x, where) for x in value)
    raise TemplateError(f"{where}: knob values must be numbers, strings, booleans, None or lists "
                        f"of them (they are stored in traces as JSON), got {value!r}")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class KnobSpace:
    """The candidate values of one knob, in index order."""

    kind = ""
    entity_class: type

    def __init__(self, name: str, candidates=()):
        if not isinstance(name, str) or not name:
            raise TemplateError(f"a knob name must be a non-empty string, got {name!r}")
        self.name = name
        self.candidates = tuple(candidates)
        self.key: tuple = ()  # how the template defined it (set by the config): must not change
        self._lookup: dict | None = None

    def __len__(self) -> int:
        return len(self.candidates)

    def index_of(self, value) -> int:
        if self._lookup is None:
            self._lookup = {v: i for i, v in enumerate(self.candidates)}
        key = json_value(value, f"knob {self.name!r}")
        if key not in self._lookup:
            shown = ", ".join(repr(list(c) if isinstance(c, tuple) else c)
                              for c in self.candidates[:8])
            more = ", ..." if len(self) > 8 else ""
            raise TemplateError(f"knob {self.name!r} has no value {value!r}; its {len(self)} "
                                f"values are {shown}{more}")
        return self._lookup[key]

    def features(self, index: int) -> list:
        """Numbers describing candidate `index`, for cost models learning on knob values."""
        value = self.candidates[index]
        items = value if isinstance(value, tuple) else (value,)
        return [float(x) if _number(x) else float(index) for x in items]

    def near(self, index: int) -> list:
        """neighbors(index), remembered (tuners ask for the same ones many times)."""
        cache = self.__dict__.setdefault("_near", {})
        out = cache.get(index)
        if out is None:
            out = cache[index] = self.neighbors(index)
        return out

    def neighbors(self, index: int) -> list:
        """Candidates one step away (hill climbing, annealing): by default the next index on
        either side."""
        return [i for i in (index - 1, index + 1) if 0 <= i < len(self)]

    def describe(self) -> str:
        return f"{type(self).__name__}({len(self)} values)"

    def __repr__(self):
        return f"{self.name}: {self.describe()}"


# ---------------------------------------------------------------------------- split
def split_candidates(extent: int, n: int, policy: str, max_factor: int) -> list:
    """(outer, f1, .., fn-1) tuples: "factors" inner factors divide the extent and the
    outer one completes it exactly; "power2" inner factors are powers of two whose product
    is at most the extent, the outer one ceil(extent / product) (a guarded tail); "verbose"
    both. Ordered by the inner factors, ascending."""
    if n == 1:
        return [(extent,)]
    choices = set()
    if policy in ("factors", "verbose"):
        choices.update(d for d in divisors(extent) if d <= max_factor)
    if policy in ("power2", "verbose"):
        choices.update(1 << k for k in range(extent.bit_length()) if 1 << k <= min(extent, max_factor))
    choices = sorted(choices)
    out = []
    for inner in itertools.product(choices, repeat=n - 1):
        p = prod(inner)
        if p > extent:
            continue
        exact = extent % p == 0
        if policy == "factors" and not exact:
            continue
        if policy == "power2" and any(f & (f - 1) for f in inner):
            continue
        out.append((-(-extent // p),) + inner)
    return out


class SplitSpace(KnobSpace):
    """Ways to split a loop of `extent` into `num_outputs` nested loops. Defined with a
    loop handle instead of an extent, the extent is read when the knob is first applied."""

    kind = "split"

    def __init__(self, name: str, extent: int | None, *, num_outputs: int, policy: str,
                 max_factor: int | None, filter=None):
        super().__init__(name)
        if isinstance(num_outputs, bool) or not isinstance(num_outputs, int) or num_outputs < 1:
            raise TemplateError(f"define_split {name!r}: num_outputs must be an int >= 1, got "
                                f"{num_outputs!r}")
        if policy not in SPLIT_POLICIES:
            raise TemplateError(f"define_split {name!r}: unknown policy {policy!r}; use one of "
                                f"{SPLIT_POLICIES}")
        if max_factor is not None and (isinstance(max_factor, bool)
                                       or not isinstance(max_factor, int) or max_factor < 1):
            raise TemplateError(f"define_split {name!r}: max_factor must be an int >= 1, got "
                                f"{max_factor!r}")
        self.extent = None
        self.num_outputs = num_outputs
        self.policy = policy
        self.max_factor = max_factor
        self.filter = filter
        if extent is not None:
            self.resolve(extent)

    @property
    def resolved(self) -> bool:
        return self.extent is not None

    def resolve(self, extent) -> None:
        if isinstance(extent, bool) or not isinstance(extent, int) or extent < 1:
            raise TemplateError(f"define_split {self.name!r}: the extent must be an int >= 1 (or "
                                f"a loop handle), got {extent!r}")
        cands = split_candidates(extent, self.num_outputs, self.policy,
                                 self.max_factor or extent)
        if self.filter is not None:
            cands = [c for c in cands if self.filter(list(c))]
        if not cands:
            raise TemplateError(f"define_split {self.name!r}: no way to split extent {extent} "
                                f"into {self.num_outputs} with policy {self.policy!r}, "
                                f"max_factor {self.max_factor} and the filter given")
        self.extent = extent
        self.candidates = tuple(cands)
        self._lookup = None
        self.__dict__.pop("_near", None)
        self._inner = {c[1:]: i for i, c in enumerate(cands)}

    def __len__(self) -> int:
        if not self.resolved:
            raise TemplateError(f"split knob {self.name!r} was defined with a loop handle and has "
                                "not been applied yet, so its size is unknown")
        return len(self.candidates)

    def features(self, index: int) -> list:
        return [math.log2(f) for f in self.candidates[index]]

    def neighbors(self, index: int) -> list:
        """Splits that move one prime factor: into or out of one inner loop (the outer one
        takes up the difference), or from one inner loop to another."""
        inner = self.candidates[index][1:]
        out = set()

        def add(f):
            j = self._inner.get(tuple(f))
            if j is not None and j != index:
                out.add(j)
        for a, p in itertools.product(range(len(inner)), sorted({2, *prime_factors(self.extent)})):
            add(inner[:a] + (inner[a] * p,) + inner[a + 1:])
            if inner[a] % p:
                continue
            less = inner[:a] + (inner[a] // p,) + inner[a + 1:]
            add(less)
            for b in range(len(inner)):
                if b != a:
                    add(less[:b] + (less[b] * p,) + less[b + 1:])
        return sorted(out)

    def describe(self) -> str:
        extent = "?" if self.extent is None else self.extent
        mf = "" if self.max_factor is None else f", max_factor={self.max_factor}"
        size = f" len={len(self.candidates)}" if self.resolved else ""
        return (f"Split(policy={self.policy}, product={extent}, num_outputs="
                f"{self.num_outputs}{mf}){size}")


# ---------------------------------------------------------------------------- knob
class OtherOptionSpace(KnobSpace):
    """A knob taking one of a list of values (unroll depths, a flag, a layout name)."""

    kind = "knob"

    def __init__(self, name: str, values):
        if not isinstance(values, (list, tuple)) or not values:
            raise TemplateError(f"define_knob {name!r}: values must be a non-empty list, got "
                                f"{values!r}")
        cands = [json_value(v, f"define_knob {name!r}") for v in values]
        if len(set(cands)) != len(cands):
            raise TemplateError(f"define_knob {name!r}: values {list(values)} repeat one")
        super().__init__(name, cands)

    def features(self, index: int) -> list:
        v = self.candidates[index]
        return [float(v)] if _number(v) else [float(index)]

    def describe(self) -> str:
        shown = [list(c) if isinstance(c, tuple) else c for c in self.candidates]
        return f"OtherOption({shown}) len={len(self)}"


# ---------------------------------------------------------------------------- reorder
def _te(sch, loops=None):
    """(looptune Schedule, loop handles) of a Schedule or a TVM-style te schedule
    (te.create_schedule), whose te axes stand for loops."""
    if isinstance(sch, TESchedule):
        return sch.sch, None if loops is None else [sch.loop(x) for x in loops]
    return sch, loops


def _loops(loops, what: str) -> list:
    if not isinstance(loops, (list, tuple)) or not loops:
        raise TemplateError(f"{what}: loops must be a non-empty list of loop handles, got "
                            f"{loops!r}")
    return list(loops)


class ReorderSpace(KnobSpace):
    """Orders of `n` loops, each a permutation of their positions (outermost first)."""

    kind = "reorder"

    def __init__(self, name: str, loops, *, policy: str, candidates=None, interval=None):
        loops = _loops(loops, f"define_reorder {name!r}")
        n = len(loops)
        if policy not in REORDER_POLICIES:
            raise TemplateError(f"define_reorder {name!r}: unknown policy {policy!r}; use one of "
                                f"{REORDER_POLICIES}")
        if policy == "all":
            if n > MAX_REORDER_LOOPS:
                raise TemplateError(f"define_reorder {name!r}: {n} loops have {math.factorial(n)} "
                                    "orders; use policy='interval' or 'candidate'")
            perms = list(itertools.permutations(range(n)))
        elif policy == "identity":
            perms = [tuple(range(n))]
        elif policy == "interval":
            if (not isinstance(interval, (list, tuple)) or len(interval) != 2
                    or not 0 <= interval[0] < interval[1] <= n):
                raise TemplateError(f"define_reorder {name!r}: policy 'interval' needs interval="
                                    f"(start, end) with 0 <= start < end <= {n}, got {interval!r}")
            a, b = interval
            perms = [tuple(range(a)) + p + tuple(range(b, n))
                     for p in itertools.permutations(range(a, b))]
        else:
            perms = [self._perm(c, loops) for c in (candidates or ())]
            if not perms:
                raise TemplateError(f"define_reorder {name!r}: policy 'candidate' needs "
                                    "candidates=[[loop, ...], ...], each an order of the loops")
        super().__init__(name, perms)
        self.num_loops = n
        self._index = {p: i for i, p in enumerate(perms)}

    def _perm(self, cand, loops) -> tuple:
        cand = list(cand)
        if all(isinstance(x, LoopRV) for x in cand):
            pos = {id(x): i for i, x in enumerate(loops)}
            cand = [pos.get(id(x), -1) for x in cand]
        if sorted(cand) != list(range(len(loops))):
            raise TemplateError(f"define_reorder {self.name!r}: candidate {cand} is not an order "
                                f"of the {len(loops)} loops (their handles or positions)")
        return tuple(cand)

    def neighbors(self, index: int) -> list:
        """Orders one swap of neighbouring loops away."""
        p = self.candidates[index]
        out = []
        for i in range(len(p) - 1):
            q = list(p)
            q[i], q[i + 1] = q[i + 1], q[i]
            j = self._index.get(tuple(q))
            if j is not None:
                out.append(j)
        return out

    def describe(self) -> str:
        return f"Reorder({self.num_loops} loops) len={len(self)}"


# ---------------------------------------------------------------------------- annotate
class AnnotateSpace(KnobSpace):
    """Per loop "none", "unroll" or "vec": "try_unroll" unrolls any of them, "try_vec"
    vectorizes the innermost or not, "try_unroll_vec" both (the innermost: none, unroll or
    vec)."""

    kind = "annotate"

    def __init__(self, name: str, loops, *, policy: str):
        loops = _loops(loops, f"define_annotate {name!r}")
        n = len(loops)
        if policy not in ANNOTATE_POLICIES:
            raise TemplateError(f"define_annotate {name!r}: unknown policy {policy!r}; use one "
                                f"of {ANNOTATE_POLICIES}")
        if policy == "try_unroll":
            per_loop = [("none", "unroll")] * n
        elif policy == "try_vec":
            per_loop = [("none",)] * (n - 1) + [("none", "vec")]
        else:
            per_loop = [("none", "unroll")] * (n - 1) + [("none", "unroll", "vec")]
        super().__init__(name, itertools.product(*per_loop))
        self.num_loops = n
        self.policy = policy
        self._index = {c: i for i, c in enumerate(self.candidates)}

    def features(self, index: int) -> list:
        return [float(ANNOTATIONS.index(a)) for a in self.candidates[index]]

    def neighbors(self, index: int) -> list:
        """Annotations that differ on one loop."""
        c = self.candidates[index]
        return sorted(j for j, d in enumerate(self.candidates)
                      if sum(a != b for a, b in zip(c, d)) == 1)

    def describe(self) -> str:
        return f"Annotate(policy={self.policy}, {self.num_loops} loops) len={len(self)}"


# ---------------------------------------------------------------------------- entities
class KnobEntity:
    """One value of a knob, in the config it belongs to."""

    def __init__(self, space: KnobSpace, index: int, config):
        self.space = space
        self.index = index
        self._config = config

    @property
    def name(self) -> str:
        return self.space.name

    @property
    def val(self):
        """The value (lists as lists)."""
        v = self.space.candidates[self.index]
        return list(v) if isinstance(v, tuple) else v

    def rvs(self, sch) -> list:
        """The knob's `sample_knob` instruction in `sch` (emitted once per schedule): its
        outputs, the value's integers as sampled values."""
        return self._config._emit(sch, self)

    def __repr__(self):
        return f"{self.name}={self.val!r}"


class SplitEntity(KnobEntity):
    """The value of a `define_split` knob: split factors (`size`), outermost first; `apply`
    splits the loop by them."""

    @property
    def size(self) -> list:
        return self.val

    def apply(self, sch, *args) -> list:
        """Split the loop (`apply(sch, loop)`, or AutoTVM's `apply(sch, block, loop)`) by
        these factors; returns the new loops, outermost first."""
        if len(args) == 2 and isinstance(args[0], (BlockRV, Tensor)):
            args = args[1:]
        if isinstance(sch, TESchedule):
            sch, args = _te(sch, args)
        if len(args) != 1 or not isinstance(args[0], LoopRV):
            raise TemplateError(f"cfg[{self.name!r}].apply(sch, loop): expected one loop handle, "
                                f"got {args!r}")
        loop = args[0]
        extent = sch.get(loop).extent
        space = self.space
        if not space.resolved:
            space.resolve(extent)
        elif extent != space.extent:
            raise TemplateError(f"split knob {self.name!r} was defined for extent {space.extent} "
                                f"but is applied to loop {sch.get(loop).loop_var.name} of extent "
                                f"{extent}; define it with that loop")
        return sch.split(loop, self.rvs(sch))


class OtherOptionEntity(KnobEntity):
    """The value of a `define_knob` knob (`val`); `apply` gives it as the schedule should use
    it, so the trace shows where."""

    def apply(self, sch):
        """The value as the schedule sees it: a sampled value (ExprRV) for an int, so that the
        trace shows where it is used (`sch.annotate(b, key, cfg["x"].apply(sch))`); any other
        value as it is (still recorded in the trace)."""
        rvs = self.rvs(_te(sch)[0])
        return rvs[0] if rvs else self.val


class ReorderEntity(KnobEntity):
    """The value of a `define_reorder` knob: a permutation of its loops (`perm`); `apply`
    reorders them."""

    @property
    def perm(self) -> list:
        return self.val

    def apply(self, sch, loops) -> list:
        """Reorder `loops` (the ones the knob was defined with) to this order; returns them
        in the new order, outermost first."""
        loops = _loops(loops, f"cfg[{self.name!r}].apply")
        sch, loops = _te(sch, loops)
        if len(loops) != self.space.num_loops:
            raise TemplateError(f"reorder knob {self.name!r} orders {self.space.num_loops} loops, "
                                f"got {len(loops)}")
        self.rvs(sch)
        order = [loops[i] for i in self.space.candidates[self.index]]
        sch.reorder(*order)
        return order


class AnnotateEntity(KnobEntity):
    """The value of a `define_annotate` knob: "unroll", "vec" or "none" per loop (`anns`);
    `apply` annotates the loops."""

    @property
    def anns(self) -> list:
        return self.val

    def apply(self, sch, loops) -> list:
        """Unroll or vectorize each of `loops` as this value says; returns the loops."""
        loops = _loops(loops, f"cfg[{self.name!r}].apply")
        sch, loops = _te(sch, loops)
        if len(loops) != self.space.num_loops:
            raise TemplateError(f"annotate knob {self.name!r} covers {self.space.num_loops} "
                                f"loops, got {len(loops)}")
        self.rvs(sch)
        for loop, ann in zip(loops, self.space.candidates[self.index]):
            if ann == "unroll":
                sch.unroll(loop)
            elif ann == "vec":
                sch.vectorize(loop)
        return list(loops)


SplitSpace.entity_class = SplitEntity
OtherOptionSpace.entity_class = OtherOptionEntity
ReorderSpace.entity_class = ReorderEntity
AnnotateSpace.entity_class = AnnotateEntity
