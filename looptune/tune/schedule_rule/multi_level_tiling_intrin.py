"""MultiLevelTilingWithIntrin: multi-level tiling around tensor intrinsics (AMX, VNNI, BF16).

For a reduction block that one of the target's tensor intrinsics computes (an int8 dense
layer, C[i, j] += int32(A[i, k]) * int32(W[j, k]) with u8 A and s8 W), the loops of the
block's last output axes are split by the unit's spatial extents (VNNI: 16 lanes of j; AMX:
32 rows of i and 32 columns of j), one reduction loop into the unit's reduction pieces (VNNI:
groups of 4; AMX: a sampled number of 64-wide steps, each 16 groups of 4), the pieces put
innermost in the unit's order and tensorized, and the loops outside tiled as
MultiLevelTiling tiles them (structure, sampled tile sizes, the accumulator tile in a local
cache written back at a sampled level, a sole elementwise consumer such as a requantization
inlined there). With VNNI the register tile is a grid of calls on accumulators the C
compiler keeps in vector registers; AMX keeps its own in tile registers. Each family of
units (`intrins`: AMX; the vector dot products) offers its best unit the target has, one
set of spaces each. A weight passed as an argument is packed (pack_layout with the group as
factor: [N][K] -> [K / group][N][group]) where that lays it out as the unit reads it: in a
graph task only its constant weights (compile_model packs them once), in a kernel of its own
any argument (the module then takes it packed: `Module.pack`).

By default the CPU's MultiLevelTiling runs this rule first (its `intrinsics` option): the
spaces around the units come ahead of the plain ones, so the search measures the units
against plain code on every task, and the plain spaces' traces stay as they were.
"""
from __future__ import annotations

from ...schedule import ScheduleError
from ...tir.functor import substitute, uses_var
from ...tir.intrin import get_intrin
from ...tir.intrin.base import computes_like
from ...tir.stmt import BufferStore
from ...tir.intrin.x86 import BF16_DOTS, INT8_DOTS
from ..postproc.rewrite_layout import LAYOUT_FREE
from .analysis import loop_kinds
from .base import ScheduleRule
from .multi_level_tiling import TILED, MultiLevelTiling

# families of units, best first in each: the rule offers each family's best the target has
DEFAULT_INTRINS = (tuple(i.name for i in INT8_DOTS[:1] + BF16_DOTS[:1]),
                   tuple(i.name for i in INT8_DOTS[1:] + BF16_DOTS[1:]))


@ScheduleRule.registry.register("multi-level-tiling-with-intrin")
class MultiLevelTilingWithIntrin(MultiLevelTiling):
    """Tiles a block around the units that compute it (module docstring): from each family
    of `intrins` (tuples of names, best first; a name alone is a family of one) the first
    the target offers whose expression the block's has. One space per unit and write level,
    plus the block unchanged when `keep_plain`."""

    def __init__(self, intrins=DEFAULT_INTRINS, structure: str = "SSRSRS",
                 max_innermost_factor: int = 8, max_innermost_reduction: int = 64,
                 write_levels=(1, 2), tile_sampler: str = "perfect",
                 keep_plain: bool = True):
        """max_innermost_factor: the register tile's extent per spatial loop, in intrinsic
        calls (the accumulators are rows times columns of vector registers);
        max_innermost_reduction: intrinsic steps between two loads and stores of the tile.
        tile_sampler "perfect": tiles that divide their loop (a partitioned tile's guard
        would sit inside the nest the accumulator is written back from)."""
        super().__init__(structure, max_innermost_factor, write_levels, "local", (),
                         tile_sampler, write_reuse="must",
                         max_innermost_reduction=max_innermost_reduction)
        self.families = tuple(tuple(get_intrin(i) for i in ((f,) if isinstance(f, str) else f))
                              for f in intrins)
        self.keep_plain = keep_plain

    def initialize_with_tune_context(self, context) -> None:
        super().initialize_with_tune_context(context)
        self.offered = [[i for i in f if i.offered_by(context.target)] for f in self.families]

    def apply(self, sch, block) -> list:
        spaces = self.unit_spaces(sch, block)
        return spaces + [sch] if spaces and self.keep_plain else spaces or [sch]

    def unit_spaces(self, sch, block) -> list:
        """The spaces around the units (copies; sch is left as it is), or []."""
        b = sch.get(block)
        if (b.name == "root" or not b.is_reduction or b.annotation(TILED) is not None
                or not isinstance(b.body, BufferStore)):
            return []
        if any(lp.kind != "serial" for lp in sch.enclosing_loops(block)):
            return []
        kinds = loop_kinds(sch, block)
        if "O" in kinds:
            return []
        br = sch.realize(block)
        store = substitute(b.body, {iv.var: v for iv, v in zip(b.iter_vars, br.iter_values)})
        spaces = []
        for family in self.offered:
            for intrin in family:
                if computes_like(store, intrin):
                    made = self._spaces(sch, block, kinds, intrin)
                    if made:
                        spaces += made
                        break
        return spaces

    def _spaces(self, sch, block, kinds, intrin) -> list:
        """One space per write level around `intrin`, from its first candidate that tiles."""
        for s_pos, r_pos, pack in self._candidates(sch, block, kinds, intrin):
            tiled = sch.copy()
            try:
                groups = self._tensorized(tiled, block, kinds, intrin, s_pos, r_pos, pack)
            except ScheduleError:
                continue
            spaces = []
            for level in self.write_levels:
                s = tiled.copy()
                try:
                    self._write_back(s, block, groups, level)
                except ScheduleError:
                    continue
                spaces.append(s)
            if spaces:
                return spaces
        return []

    def _candidates(self, sch, block, kinds, intrin):
        """(spatial loops, reduction loop, argument to pack or None). The unit's spatial loops
        (those its accumulator's index uses) take the loops of the block's last output axes,
        in order; its reduction loops are pieces of one reduction loop of the block, tried
        innermost first, each only where the unit's extents divide the loop's."""
        spatial, reduction = _roles(intrin)
        loops = [sch.get(lp) for lp in sch.get_loops(block)]
        b, br = sch.get(block), sch.realize(block)
        out = b.writes[0].buffer
        index = b.body.indices
        if len(index) < len(spatial):
            return
        position = {}  # block variable -> the loop that alone drives it
        for iv, value in zip(b.iter_vars, br.iter_values):
            for p, lp in enumerate(loops):
                if value is lp.loop_var:
                    position[iv.var] = p
        s_pos = []
        for k, factor in zip(range(len(index) - len(spatial), len(index)), (f for _, f in spatial)):
            p = position.get(index[k])
            if p is None or kinds[p] != "S" or loops[p].extent % factor:
                return
            s_pos.append(p)
        fixed = 1
        for _, f in reduction:
            fixed *= f or 1
        r_positions = [p for p in reversed(range(len(loops)))
                       if kinds[p] == "R" and loops[p].extent % fixed == 0]
        params = sch.func.params
        free = sch.func.attr(LAYOUT_FREE)  # a graph task: its constant weights only
        packable = [None] + [i for i, r in enumerate(b.reads) if r.buffer in params
                             and r.buffer is not out
                             and (free is None or params.index(r.buffer) in free)]
        for r_pos in r_positions:
            for pack in packable:
                yield tuple(s_pos), r_pos, pack

    def _tensorized(self, sch, block, kinds, intrin, s_pos: tuple, r_pos: int, pack):
        """Pack `pack` by the unit's group, split the loops into the unit's pieces (a free
        piece's extent sampled), tile the loops outside as MultiLevelTiling does, put the
        pieces innermost in the unit's order and tensorize them."""
        spatial, reduction = _roles(intrin)
        if pack is not None:
            sch.pack_layout(block, pack, reduction[-1][1])
        loops = sch.get_loops(block)
        outer = list(loops)
        pieces = {}  # the unit's loop index -> the block's loop piece
        for (k, factor), p in zip(spatial, s_pos):
            outer[p], pieces[k] = sch.split(loops[p], [None, factor])
        fixed = [f for _, f in reduction if f]
        total = 1
        for f in fixed:
            total *= f
        rest, inner = sch.split(loops[r_pos], [None, total])
        inner = sch.split(inner, fixed) if len(fixed) > 1 else [inner]
        free_at = [k for k, f in reduction if f is None]
        if free_at:
            tiles = sch.sample_perfect_tile(rest, n=2, max_innermost_factor=self.max_innermost_reduction)
            rest, pieces[free_at[0]] = sch.split(rest, tiles)
        for (k, f), piece in zip([r for r in reduction if r[1]], inner):
            pieces[k] = piece
        outer[r_pos] = rest
        tail = [pieces[k] for k in range(len(intrin.extents))]
        groups = self._tile(sch, block, kinds, loops=outer, tail=tail)
        sch.tensorize(tail[0], intrin.name)
        sch.annotate(block, TILED, self.structure)
        return groups


def _roles(intrin):
    """The unit's loops as ([(index, extent)] of its spatial loops, those its accumulator's
    index uses, and [(index, extent or None if free)] of its reduction loops), in order."""
    store = intrin.store
    spatial, reduction = [], []
    for k, lp in enumerate(intrin.loops):
        if any(uses_var(i, {lp.loop_var}) for i in store.indices):
            spatial.append((k, lp.extent))
        else:
            reduction.append((k, None if k in intrin.free else lp.extent))
    return spatial, reduction
