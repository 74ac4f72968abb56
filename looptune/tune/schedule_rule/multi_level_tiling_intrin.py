"""MultiLevelTilingWithIntrin: multi-level tiling around a tensor intrinsic (VNNI, BF16 dot).

For a reduction block that one of the target's tensor intrinsics computes (an int8 dense
layer, C[i, j] += int32(A[i, k]) * int32(W[j, k]) with u8 A and s8 W), a spatial loop is
split by the intrinsic's lanes and a reduction loop by its group, the two inner pieces are
put innermost and tensorized, and the loops outside are tiled as MultiLevelTiling tiles them
(structure, sampled tile sizes, the accumulator tile in a local cache written back at a
sampled level, a sole elementwise consumer such as a requantization inlined there). The
register tile is then a grid of intrinsic calls on accumulators the C compiler keeps in
vector registers. A weight passed as an argument is packed (pack_layout with the group as
factor: [N][K] -> [K / group][N][group]) where that lays it out as the unit reads it: in a
graph task only its constant weights (compile_model packs them once), in a kernel of its own
any argument (the module then takes it packed: `Module.pack`).

The block also stays as it was, for the plain rules after this one, so the search measures
the unit against plain code on every task.
"""
from __future__ import annotations

from ...schedule import ScheduleError
from ...tir.functor import substitute
from ...tir.intrin import get_intrin
from ...tir.intrin.base import computes_like
from ...tir.stmt import BufferStore
from ...tir.intrin.x86 import BF16_DOTS, INT8_DOTS
from ..postproc.rewrite_layout import LAYOUT_FREE
from .analysis import loop_kinds
from .base import ScheduleRule
from .multi_level_tiling import TILED, MultiLevelTiling

DEFAULT_INTRINS = tuple(i.name for i in INT8_DOTS + BF16_DOTS)  # best first per data type


@ScheduleRule.registry.register("multi-level-tiling-with-intrin")
class MultiLevelTilingWithIntrin(MultiLevelTiling):
    """Tiles a block one of `intrins` computes around that intrinsic (module docstring): the
    first of them the target offers whose expression the block's has. One space per write
    level, plus the block unchanged when `keep_plain`."""

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
        self.intrins = tuple(get_intrin(i) for i in intrins)
        self.keep_plain = keep_plain

    def initialize_with_tune_context(self, context) -> None:
        super().initialize_with_tune_context(context)
        self.offered = [i for i in self.intrins if i.offered_by(context.target)]

    def apply(self, sch, block) -> list:
        b = sch.get(block)
        if (b.name == "root" or not b.is_reduction or b.annotation(TILED) is not None
                or not isinstance(b.body, BufferStore)):
            return [sch]
        if any(lp.kind != "serial" for lp in sch.enclosing_loops(block)):
            return [sch]
        kinds = loop_kinds(sch, block)
        if "O" in kinds:
            return [sch]
        br = sch.realize(block)
        store = substitute(b.body, {iv.var: v for iv, v in zip(b.iter_vars, br.iter_values)})
        for intrin in self.offered:
            if not computes_like(store, intrin):
                continue
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
                    return spaces + ([sch] if self.keep_plain else [])
        return [sch]

    def _candidates(self, sch, block, kinds, intrin):
        """(spatial loop, reduction loop, argument to pack or None): innermost loops first,
        unpacked first; only loops the intrinsic's extents divide."""
        lanes, group = intrin.extents
        loops = [sch.get(lp) for lp in sch.get_loops(block)]
        spatial = [p for p in reversed(range(len(loops)))
                   if kinds[p] == "S" and loops[p].extent % lanes == 0]
        reduction = [p for p in reversed(range(len(loops)))
                     if kinds[p] == "R" and loops[p].extent % group == 0]
        b = sch.get(block)
        params = sch.func.params
        free = sch.func.attr(LAYOUT_FREE)  # a graph task: its constant weights only
        packable = [None] + [i for i, r in enumerate(b.reads) if r.buffer in params and (
            free is None or params.index(r.buffer) in free)]
        for s_pos in spatial:
            for r_pos in reduction:
                for pack in packable:
                    yield s_pos, r_pos, pack

    def _tensorized(self, sch, block, kinds, intrin, s_pos: int, r_pos: int, pack):
        lanes, group = intrin.extents
        if pack is not None:
            sch.pack_layout(block, pack, group)
        loops = sch.get_loops(block)
        j_out, j_in = sch.split(loops[s_pos], [None, lanes])
        k_out, k_in = sch.split(loops[r_pos], [None, group])
        outer = list(loops)
        outer[s_pos], outer[r_pos] = j_out, k_out
        groups = self._tile(sch, block, kinds, loops=outer, tail=(j_in, k_in))
        sch.tensorize(j_in, intrin.name)
        sch.annotate(block, TILED, self.structure)
        return groups
