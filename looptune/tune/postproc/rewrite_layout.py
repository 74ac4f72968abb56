"""RewriteLayout: pack a model's constant weights in the order the schedule reads them,
and a tensor intrinsic's weights by the tile that reads them.

A graph task marks the arguments that are constants of the model (function attribute
"layout_free_params": their positions). For each, when one reduction block reads it and
its last index is one iteration variable (a conv's output channel in [C][R][S][K], a
matmul's column in [K][N]), the tile of that variable covered inside the outermost
reduction loop becomes the block size of schedule.pack_layout: the weight is stored as
[K / f][C][R][S][f], so each output-channel tile reads one contiguous run per pass over the
reduction instead of f elements out of every row. compile_model packs the constants once,
at compile time; the tuner's runner packs its random inputs the same way, so what is
measured is what the model runs.
"""
from __future__ import annotations

from math import prod

from ...schedule.primitives.layout import PACKED
from ...tir.arith.simplify import simplify
from ...tir.expr import BufferLoad, Var
from ...tir.functor import collect_vars, visit
from ...tir.intrin import TENSORIZE
from .base import Postproc

LAYOUT_FREE = "layout_free_params"


def _loads_of(block, buf) -> list:
    out = []
    visit(block.body, lambda n: out.append(n) if isinstance(n, BufferLoad) and n.buffer is buf
          else None)
    return out


def block_factor(loops: list, binding, reduce_vars: set) -> int | None:
    """The extent of `binding` covered by the loops inside the outermost reduction loop, if
    those loops are exactly its lowest digits (binding = outer * f + inner, inner < f)."""
    first = next((i for i, lp in enumerate(loops) if lp.loop_var in reduce_vars), None)
    if first is None:
        return None
    used = collect_vars(binding)
    inner = [lp for lp in loops[first:] if lp.loop_var in used]
    outer = [lp for lp in loops[:first] if lp.loop_var in used]
    f = prod(lp.extent for lp in inner)
    if f < 2:
        return None
    dom = {lp.loop_var: (0, lp.extent - 1) for lp in loops}
    inner_vars = {lp.loop_var for lp in inner}
    outer_vars = {lp.loop_var for lp in outer}
    if collect_vars(simplify(binding // f, dom)) & inner_vars or \
            collect_vars(simplify(binding % f, dom)) & outer_vars:
        return None
    return f


@Postproc.registry.register("rewrite-layout")
class RewriteLayout(Postproc):
    """Packs each layout-free weight read by a single reduction block in the tile order of that
    block (schedule.pack_layout); keeps every schedule, packing only where it can."""

    def apply(self, sch) -> bool:
        for pos in sch.func.attr(LAYOUT_FREE, ()):
            if pos in dict(sch.func.attr(PACKED, ())):
                continue
            buf = sch.func.params[pos]
            readers = [br for br in map(sch.realize, sch.block_names())
                       if any(r.buffer is buf for r in br.block.reads)]
            if len(readers) != 1 or not readers[0].block.is_reduction:
                continue
            br = readers[0]
            block = br.block
            loads = _loads_of(block, buf)
            lasts = {ld.indices[-1] for ld in loads}
            if len(lasts) != 1:
                continue
            last = lasts.pop()
            ivs = [iv.var for iv in block.iter_vars]
            if not isinstance(last, Var) or last not in ivs:
                continue
            f = _tile_factor(sch, br, last)
            if f is None or f >= buf.shape[-1]:
                continue
            read_index = next(i for i, r in enumerate(block.reads) if r.buffer is buf)
            sch.pack_layout(sch.get_block(block.name), read_index, f)
        self._tile_intrinsic_weights(sch)
        return True

    @staticmethod
    def _tile_intrinsic_weights(sch):
        """A weight the tensor-intrinsic rule packed by the unit's group ([K / 4][N][4] for
        VNNI) packed again by the tile of its column axis inside the outermost reduction loop
        ([N / 64][K / 4][64][4]): each tile's groups are then one run, where in [K / 4][N][4]
        every group step of a tile is 4 N bytes further on."""
        for pos, spec in sch.func.attr(PACKED, ()):
            if not isinstance(spec, int):
                continue  # packed twice already
            buf = sch.func.params[pos]
            readers = [br for br in map(sch.realize, sch.block_names())
                       if any(r.buffer is buf for r in br.block.reads)]
            if len(readers) != 1 or not any(
                    lp.annotation(TENSORIZE) for lp in sch.enclosing_loops(readers[0].block.name)):
                continue
            br = readers[0]
            loads = _loads_of(br.block, buf)
            ivs = [iv.var for iv in br.block.iter_vars]
            for axis in range(1, buf.ndim - 1):
                index = {ld.indices[axis] for ld in loads}
                if len(index) != 1:
                    continue
                var = index.pop()
                if not isinstance(var, Var) or var not in ivs:
                    continue
                f = _tile_factor(sch, br, var)
                if f is None or f >= buf.shape[axis]:
                    continue
                read_index = next(i for i, r in enumerate(br.block.reads) if r.buffer is buf)
                sch.pack_layout(sch.get_block(br.block.name), read_index, f, axis=axis)
                break


def _tile_factor(sch, br, var) -> int | None:
    """The block factor (block_factor) of the loops that drive block variable `var`."""
    block = br.block
    ivs = [iv.var for iv in block.iter_vars]
    binding = br.iter_values[ivs.index(var)]
    reduce_vars = set()
    for iv, v in zip(block.iter_vars, br.iter_values):
        if iv.kind == "R":
            reduce_vars |= collect_vars(v)
    return block_factor(sch.enclosing_loops(block.name), binding, reduce_vars)
