"""Schedule: apply loop and block transformations to a PrimFunc, recording a trace.

Every method is thin: it runs one registered instruction (see `primitives/`) and appends it
to `sch.trace`. A failed request raises ScheduleError and leaves the schedule unchanged.
The queries (`block_names`, `enclosing_loops`, `realize`, ...) read the current function and
record nothing; `checkpoint` / `rewind` let search return to an earlier point cheaply.
"""
from __future__ import annotations

import numbers
import os
import random
from dataclasses import dataclass

from ..tir.func import PrimFunc
from ..tir.stmt import Block, BlockRealize, For
from . import primitives  # noqa: F401  (registers the instruction kinds)
from .primitives.compute_at import _location_loops
from .error import ScheduleError
from .state import State
from .trace import INSTRUCTIONS, BlockRV, ExprRV, Instruction, InstructionKind, LoopRV, RV, Trace


def _ints(method: str, **values) -> list:
    """The integer arguments of a primitive, or ScheduleError naming the one that is not."""
    for name, x in values.items():
        if isinstance(x, bool) or not isinstance(x, numbers.Integral):
            raise ScheduleError(f"{method}: {name} must be an int, got {x!r}")
    return [int(x) for x in values.values()]


def _tiles(decision):
    """A tile-size decision given to a sampling method: None or a tuple of them."""
    if decision is None:
        return None
    if not isinstance(decision, (list, tuple)):
        raise ScheduleError(f"a tile decision must be a list of tile sizes, got {decision!r}")
    return tuple(decision)


def _frozen(value):
    """Lists as tuples, all the way down: attribute values as a trace read from JSON has them."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(x) for x in value)
    return value


@dataclass(frozen=True, eq=False)
class Checkpoint:
    """A schedule as it was after its first `length` instructions (see Schedule.checkpoint)."""
    func: PrimFunc
    rvs: dict           # handle -> its value then
    rand_state: tuple   # the sampling state then
    length: int         # instructions in the trace then
    last: object        # the last of them (None if none): rewind checks it is the same trace
    original: PrimFunc


class Schedule:
    """Transforms a PrimFunc by primitives, recording each in `trace` (module docstring). `seed`
    drives every sampling instruction; the same seed and trace give the same schedule."""

    def __init__(self, func: PrimFunc, *, seed: int | None = None):
        self.state = State(func)
        self.original = func
        self.trace = Trace()
        self._rv: dict = {}
        self.seed = seed if seed is not None else int.from_bytes(os.urandom(4), "little")
        self.rand = random.Random(self.seed)

    # ------------------------------------------------------------------ state
    @property
    def func(self) -> PrimFunc:
        """The scheduled function as it is now."""
        return self.state.func

    mod = func

    def copy(self, *, seed: int | None = None) -> "Schedule":
        """An independent copy (same IR, trace and handles); `seed` reseeds its sampling."""
        out = Schedule.__new__(Schedule)
        out.state = State(self.state.func)
        out.original = self.original
        out.trace = self.trace.copy()
        out._rv = dict(self._rv)
        out.seed = self.seed if seed is None else seed
        out.rand = random.Random()
        if seed is None:
            out.rand.setstate(self.rand.getstate())
        else:
            out.rand.seed(seed)
        return out

    def checkpoint(self) -> Checkpoint:
        """The schedule as it is now, taken cheaply (the IR is immutable; the handle table is
        copied): `rewind` returns to it without replaying what came before. Search keeps one
        before every sampling instruction, so a changed decision replays from there."""
        insts = self.trace.insts
        return Checkpoint(self.state.func, dict(self._rv), self.rand.getstate(), len(insts),
                          insts[-1] if insts else None, self.original)

    def rewind(self, checkpoint: Checkpoint, *, seed: int | None = None) -> "Schedule":
        """A new schedule as this one was at `checkpoint` (taken on it, or on a schedule it
        was copied or rewound from): that function, those handles, and the trace up to there
        with its decisions. `seed` reseeds its sampling; without it, sampling goes on from the
        checkpoint's state. This schedule is left as it is."""
        n, insts = checkpoint.length, self.trace.insts
        if checkpoint.original is not self.original or n > len(insts) or (
                n and insts[n - 1] is not checkpoint.last):
            raise ValueError("rewind: the checkpoint was not taken on this schedule's trace")
        out = Schedule.__new__(Schedule)
        out.state = State(checkpoint.func)
        out.original = self.original
        prefix = insts[:n]
        out.trace = Trace(prefix, {i: self.trace.decisions[i] for i in prefix
                                   if i in self.trace.decisions})
        out._rv = dict(checkpoint.rvs)
        if seed is None:
            out.seed = self.seed
            out.rand = random.Random()
            out.rand.setstate(checkpoint.rand_state)
        else:
            out.seed = seed
            out.rand = random.Random(seed)
        return out

    def fork_seed(self) -> int:
        return self.rand.randrange(1 << 31)

    def get(self, rv):
        """The current value behind a handle: a For, a Block, or an int."""
        if isinstance(rv, LoopRV):
            return self._loop(rv).node
        if isinstance(rv, BlockRV):
            return self._block(rv).node.block
        if isinstance(rv, ExprRV):
            return self._int(rv)
        raise TypeError(f"not a schedule handle: {rv!r}")

    def memo(self, key, compute):
        """`compute(func)` of the current function, kept (under `key`) until the schedule
        changes: what several readers derive from one state (its stage-1 lowering: the
        backend's, shared by verification, features and the build) is computed once."""
        func = self.state.func
        memo = getattr(self, "_memo", None)
        if memo is None or memo[0] is not func:
            memo = self._memo = (func, {})
        if key not in memo[1]:
            memo[1][key] = compute(func)
        return memo[1][key]

    def show(self) -> str:
        return self.func.script()

    # ------------------------------------------------------------------ queries
    # What rules, postprocessors and analyses ask about the current function while deciding
    # what to do. They record nothing in the trace (get_block / get_loops do: use those for
    # handles that later instructions take). `block` is a handle or a block's name.
    def block_names(self) -> list[str]:
        """The names of all blocks of the current function, "root" first, in pre-order
        (within a scope, in program order)."""
        return list(self.state.index.blocks)

    def has_block(self, name: str) -> bool:
        """Does a block of this name exist now (an inlining removes one)?"""
        return name in self.state.index.blocks

    def realize(self, block) -> BlockRealize:
        """The BlockRealize of a block: its iter_values (each iteration variable's binding, in
        the loop variables around it) and its predicate."""
        return self._block_entry(block).node

    def parents(self, block_or_loop) -> tuple:
        """The statements enclosing a block or loop, outermost first: loops, blocks (a block
        encloses its body as its BlockRealize, then its Block), ifs, allocations."""
        if isinstance(block_or_loop, LoopRV):
            return self._loop(block_or_loop).parents
        return self._block_entry(block_or_loop).parents

    def enclosing_loops(self, block) -> list[For]:
        """The For nodes around a block, outermost first: get_loops' loops as they are now,
        without recording a GetLoops."""
        return [p for p in self._block_entry(block).parents if isinstance(p, For)]

    def exists(self, rv) -> bool:
        """Does a handle still stand for a loop or block of the current function? False once
        a later split, fuse or inlining replaced it, and for handles of another schedule."""
        if isinstance(rv, LoopRV):
            var = self._rv.get(rv)
            return var is not None and not isinstance(var, str) and var in self.state.index.loops
        if isinstance(rv, BlockRV):
            return self._rv.get(rv) in self.state.index.blocks
        if isinstance(rv, ExprRV):
            return rv in self._rv
        raise TypeError(f"not a schedule handle: {rv!r}")

    def compute_locations(self, block) -> list[For]:
        """The loops that sample_compute_location's decisions 0..n-1 stand for: those every
        consumer of the block shares, outermost first (compute_at checks each for legality)."""
        return _location_loops(self, block)

    # ------------------------------------------------------------------ instruction plumbing
    def apply_instruction(self, kind: InstructionKind | str, inputs, attrs, decision=None) -> tuple:
        """Run one instruction (a kind or its name) on handles of this schedule and record it:
        what every method here does, and what a trace replay does for each instruction. A
        sampling kind takes `decision` (None: sample). Returns the outputs; on ScheduleError
        the schedule is unchanged."""
        if isinstance(kind, str):
            kind = INSTRUCTIONS[kind]
        saved_func, saved_rv = self.state.func, dict(self._rv)
        saved_rand = self.rand.getstate() if kind.sampling else None
        try:
            res = kind.apply(self, tuple(inputs), tuple(attrs), decision)
        except BaseException:
            self.state.set_func(saved_func)
            self._rv = saved_rv
            if saved_rand is not None:
                self.rand.setstate(saved_rand)
            raise
        if kind.sampling:
            outputs, decision = res
        else:
            outputs, decision = res, None
        outputs = tuple(outputs)
        self.trace.append(Instruction(kind, tuple(inputs), tuple(attrs), outputs), decision)
        return outputs

    def _loop(self, rv):
        if not isinstance(rv, LoopRV):
            raise ScheduleError(f"expected a loop handle (from get_loops / split / fuse), got {rv!r}")
        var = self._rv.get(rv)
        if var is None:
            raise ScheduleError(f"{rv!r} is not a loop of this schedule")
        if isinstance(var, str):
            raise ScheduleError(f"this handle stands for the location {var!r} picked by "
                                "sample_compute_location; pass it to compute_at only")
        return self.state.loop(var)

    def _block(self, rv):
        if not isinstance(rv, BlockRV):
            raise ScheduleError(f"expected a block handle (from get_block), got {rv!r}")
        name = self._rv.get(rv)
        if name is None:
            raise ScheduleError(f"{rv!r} is not a block of this schedule")
        return self.state.block(name)

    def _int(self, x) -> int:
        if isinstance(x, ExprRV):
            v = self._rv.get(x)
            if v is None:
                raise ScheduleError(f"{x!r} is not a sampled value of this schedule")
            return v
        if isinstance(x, bool) or not isinstance(x, int):
            raise ScheduleError(f"expected an integer or a sampled value, got {x!r}")
        return x

    def _new(self, cls, value) -> RV:
        rv = cls()
        self._rv[rv] = value
        return rv

    def _block_entry(self, block):
        """The index entry of a block given by handle or by name."""
        return self.state.block(block) if isinstance(block, str) else self._block(block)

    def _loop_or_block(self, rv):
        if isinstance(rv, LoopRV):
            return self._loop(rv)
        if isinstance(rv, BlockRV):
            return self._block(rv)
        raise ScheduleError(f"expected a loop or block handle, got {rv!r}")

    # ------------------------------------------------------------------ lookups
    def get_block(self, name: str) -> BlockRV:
        return self.apply_instruction("GetBlock", [], [name])[0]

    def get_loops(self, block: BlockRV) -> list[LoopRV]:
        return list(self.apply_instruction("GetLoops", [block], []))

    def get_child_blocks(self, block_or_loop) -> list[BlockRV]:
        return list(self.apply_instruction("GetChildBlocks", [block_or_loop], []))

    def get_producers(self, block: BlockRV) -> list[BlockRV]:
        return list(self.apply_instruction("GetProducers", [block], []))

    def get_consumers(self, block: BlockRV) -> list[BlockRV]:
        return list(self.apply_instruction("GetConsumers", [block], []))

    # ------------------------------------------------------------------ loops
    def split(self, loop: LoopRV, factors) -> list[LoopRV]:
        """Split `loop` into len(factors) nested loops, outermost first; at most one factor
        may be None (inferred). If the factors over-cover the extent, the blocks under the
        loop get the guard predicate `outer * inner_extent + inner < extent`."""
        if not isinstance(factors, (list, tuple)):
            raise ScheduleError(f"split: factors must be a list such as [None, 8], got {factors!r}")
        return list(self.apply_instruction("Split", [loop, *factors], []))

    def fuse(self, *loops: LoopRV) -> LoopRV:
        """Fuse directly nested loops into one: fused == ((l0 * n1) + l1) * n2 + l2 ..."""
        return self.apply_instruction("Fuse", list(loops), [])[0]

    def reorder(self, *loops: LoopRV) -> None:
        """Put the given loops (of one perfect nest) in the given order, outermost first."""
        self.apply_instruction("Reorder", list(loops), [])

    def add_unit_loop(self, block_or_loop) -> LoopRV:
        """Wrap a block or loop in a new loop of extent 1."""
        return self.apply_instruction("AddUnitLoop", [block_or_loop], [])[0]

    # ------------------------------------------------------------------ annotations
    def parallel(self, loop: LoopRV) -> None:
        self.apply_instruction("Parallel", [loop], [])

    def vectorize(self, loop: LoopRV) -> None:
        self.apply_instruction("Vectorize", [loop], [])

    def unroll(self, loop: LoopRV) -> None:
        self.apply_instruction("Unroll", [loop], [])

    def bind(self, loop: LoopRV, thread_axis: str) -> None:
        """Bind a loop to a GPU thread axis such as "blockIdx.x" or "threadIdx.x"."""
        self.apply_instruction("Bind", [loop], [thread_axis])

    def annotate(self, block_or_loop, ann_key: str, ann_val) -> None:
        """Attach key=value (an int, float, str or sampled value) to a block or loop.

        Known keys: pragma_auto_unroll_max_step (unroll inner loops whose total trip count
        is at most the value), pragma_unroll_explicit (1: unroll in the generated code rather
        than by the C compiler), pragma_parallel / vectorize extents for postprocessors."""
        if isinstance(ann_val, str):
            self.apply_instruction("Annotate", [block_or_loop], [ann_key, ann_val])
        else:
            self.apply_instruction("Annotate", [block_or_loop, ann_val], [ann_key])

    def unannotate(self, block_or_loop, ann_key: str) -> None:
        self.apply_instruction("Unannotate", [block_or_loop], [ann_key])

    # ------------------------------------------------------------------ sampling
    def sample_perfect_tile(self, loop: LoopRV, n: int, max_innermost_factor: int = 16,
                            decision=None, *, max_factors=None) -> list[ExprRV]:
        """n tile sizes whose product is the loop's extent, the innermost at most
        max_innermost_factor. `max_factors` (one limit or None per tile) limits every level
        instead: each limited tile is drawn among the divisors within its limit (a GPU's
        virtual threads, threads and registers per axis), the unlimited ones take the rest."""
        attrs = [n, max_innermost_factor]
        if max_factors is not None:
            attrs.append([None if m is None else int(m) for m in max_factors])
        return list(self.apply_instruction("SamplePerfectTile", [loop], attrs, _tiles(decision)))

    def sample_tile(self, loop: LoopRV, n: int, max_innermost_factor: int = 16,
                    decision=None) -> list[ExprRV]:
        """n tile sizes that may over-cover the loop: the innermost is any divisor, or a small
        or 8-aligned non-divisor wasting little (6 on 1024: a 6x16 register tile), and the
        outer ones multiply to ceil(extent / innermost). Split by them, the loop gets a
        guarded tail, which lowering partitions off the guard-free main part."""
        return list(self.apply_instruction("SampleTile", [loop], [n, max_innermost_factor],
                                           _tiles(decision)))

    def sample_categorical(self, candidates, probs=None, decision=None) -> ExprRV:
        """One of `candidates` (ints), drawn with probabilities `probs` (uniform if None)."""
        if not isinstance(candidates, (list, tuple)) or not (
                probs is None or isinstance(probs, (list, tuple))):
            raise ScheduleError(f"sample_categorical: candidates and probs must be lists, got "
                                f"{candidates!r} and {probs!r}")
        if probs is not None and not all(isinstance(p, numbers.Real) for p in probs):
            raise ScheduleError(f"sample_categorical: probs must be numbers, got {probs!r}")
        candidates = tuple(candidates)
        probs = tuple(float(p) for p in probs) if probs is not None else tuple(
            1.0 / len(candidates) for _ in candidates)
        return self.apply_instruction("SampleCategorical", [], [candidates, probs], decision)[0]

    def sample_knob(self, name: str, candidates, decision=None) -> list[ExprRV]:
        """The value of template knob `name`: one of `candidates` (JSON values), decision its
        index. Returns the value's integers as sampled values (a split knob's factors, an int
        knob's value; none for other values). Templates emit it (looptune.template) so a
        record's trace says which config it measured."""
        if not isinstance(candidates, (list, tuple)):
            raise ScheduleError(f"sample_knob: candidates must be a list, got {candidates!r}")
        return list(self.apply_instruction("SampleKnob", [], [name, _frozen(candidates)], decision))

    def sample_compute_location(self, block: BlockRV, decision=None) -> LoopRV:
        """A loop at which `block` can be computed (decision: an index into the candidate
        loops, -1 for where it is now, -2 for inline)."""
        return self.apply_instruction("SampleComputeLocation", [block], [], decision)[0]

    # ------------------------------------------------------------------ blocks
    def compute_inline(self, block: BlockRV) -> None:
        """Inline an elementwise block into its consumers (its buffer disappears)."""
        self.apply_instruction("ComputeInline", [block], [])

    def reverse_compute_inline(self, block: BlockRV) -> None:
        """Inline an elementwise consumer into its producer."""
        self.apply_instruction("ReverseComputeInline", [block], [])

    def compute_at(self, block: BlockRV, loop: LoopRV, preserve_unit_loops: bool = False) -> None:
        """Move a producer under a loop of its consumer, computing only the region that the
        consumer's iteration of that loop needs."""
        self.apply_instruction("ComputeAt", [block, loop], [bool(preserve_unit_loops)])

    def reverse_compute_at(self, block: BlockRV, loop: LoopRV,
                           preserve_unit_loops: bool = False) -> None:
        """Move a consumer under a loop of its producer, consuming the region produced there."""
        self.apply_instruction("ReverseComputeAt", [block, loop], [bool(preserve_unit_loops)])

    def cache_read(self, block: BlockRV, read_buffer_index: int, storage_scope: str) -> BlockRV:
        """A new block copying the block's read buffer #index into a `storage_scope` buffer,
        which the block then reads instead."""
        index = _ints("cache_read", read_buffer_index=read_buffer_index)
        return self.apply_instruction("CacheRead", [block], [*index, storage_scope])[0]

    def cache_write(self, block: BlockRV, write_buffer_index: int, storage_scope: str) -> BlockRV:
        """The block writes into a new `storage_scope` buffer; a new block copies it back."""
        index = _ints("cache_write", write_buffer_index=write_buffer_index)
        return self.apply_instruction("CacheWrite", [block], [*index, storage_scope])[0]

    def set_scope(self, block: BlockRV, buffer_index: int, storage_scope: str) -> None:
        index = _ints("set_scope", buffer_index=buffer_index)
        self.apply_instruction("SetScope", [block], [*index, storage_scope])

    def storage_align(self, block: BlockRV, buffer_index: int, axis: int, factor: int,
                      offset: int) -> None:
        """Pad the stride of `axis` of the block's written buffer to factor*k + offset."""
        self.apply_instruction("StorageAlign", [block], _ints(
            "storage_align", buffer_index=buffer_index, axis=axis, factor=factor, offset=offset))

    def pack_layout(self, block: BlockRV, read_index: int, factor: int,
                    axis: int | None = None) -> None:
        """Store the argument the block reads as read buffer #read_index with its last axis
        (or `axis`) in blocks of `factor`, outermost: (d0, .., dn) -> (ceil(dn / factor), d0,
        .., dn-1, factor). The function then takes that argument packed; its attribute
        "packed_params" says which ones and how, runtime.ndarray.pack_array (or the built
        module's `pack`) packs them. Packing a packed argument again packs its new layout."""
        attrs = _ints("pack_layout", read_index=read_index, factor=factor)
        if axis is not None:
            attrs += _ints("pack_layout", axis=axis)
        self.apply_instruction("PackLayout", [block], attrs)

    def permute_layout(self, block: BlockRV, write_index: int, order) -> None:
        """Store the intermediate buffer the block writes as write buffer #write_index with
        its axes in `order` (new axis d is old axis order[d]); every access follows."""
        index = _ints("permute_layout", write_index=write_index)
        order = list(order)
        _ints("permute_layout", **{f"order[{i}]": x for i, x in enumerate(order)})
        self.apply_instruction("PermuteLayout", [block], [*index, [int(x) for x in order]])

    def decompose_reduction(self, block: BlockRV, loop: LoopRV) -> BlockRV:
        """Move the block's init into its own block placed before `loop`."""
        return self.apply_instruction("DecomposeReduction", [block, loop], [])[0]

    def rfactor(self, loop: LoopRV, factor_axis: int) -> BlockRV:
        """Factor the reduction over `loop` into a partial-result block (one result per
        iteration of `loop`, stored along `factor_axis` of a new buffer) and a final
        reduction over them. Returns the partial-result block."""
        return self.apply_instruction("RFactor", [loop],
                                      _ints("rfactor", factor_axis=factor_axis))[0]

    def tensorize(self, loop: LoopRV, intrin) -> None:
        """Compute the loop nest from `loop` down with a tensor intrinsic (its name, or a
        TensorIntrin: tir.intrin.intrin_names() lists them); the nest must compute what the
        intrinsic's description does (same extents, expression and operand layout)."""
        name = getattr(intrin, "name", intrin)
        if not isinstance(name, str):
            raise ScheduleError(f"tensorize: intrin must be a name or a TensorIntrin, got {intrin!r}")
        self.apply_instruction("Tensorize", [loop], [name])

    def enter_postproc(self) -> None:
        """Mark the point after which the trace holds postprocessing instructions."""
        self.apply_instruction("EnterPostproc", [], [])


__all__ = ["Schedule", "ScheduleError", "BlockRV", "LoopRV", "ExprRV", "For", "Block"]
