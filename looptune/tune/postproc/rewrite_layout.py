"""RewriteLayout: pack a model's constant weights in the order the schedule reads them.

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
            binding = br.iter_values[ivs.index(last)]
            reduce_vars = set()
            for iv, v in zip(block.iter_vars, br.iter_values):
                if iv.kind == "R":
                    reduce_vars |= collect_vars(v)
            f = block_factor(sch.enclosing_loops(block.name), binding, reduce_vars)
            if f is None or f >= buf.shape[-1]:
                continue
            read_index = next(i for i, r in enumerate(block.reads) if r.buffer is buf)
            sch.pack_layout(sch.get_block(block.name), read_index, f)
        return True
