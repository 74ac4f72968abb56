"""MultiLevelTiling: tile a reduction with data reuse (matmul, conv) by a structure string.

"SSRSRS" (the CPU default) splits every spatial loop into 4 and every reduction loop into 2
with sample_perfect_tile, and orders the pieces S0 S1 R0 S2 R1 S3: the innermost S3 x R1 is
the register tile, S2 x R1 its cache block. The result is written back per tile at a
sampled level: by fusing an elementwise consumer there (reverse_compute_at), or through a
local cache_write (the accumulator tile that lowering turns into a stack array). With
`read_levels`, each input is also copied per tile (cache_read + compute_at at the end of that
reduction group), which lowering compacts into a contiguous packed panel.
"""
from __future__ import annotations

from ...schedule import ScheduleError
from .analysis import has_reuse, is_elementwise, loop_kinds
from .base import ScheduleRule

TILED = "meta_schedule.tiling_structure"


@ScheduleRule.registry.register("multi-level-tiling")
class MultiLevelTiling(ScheduleRule):
    def __init__(self, structure: str = "SSRSRS", max_innermost_factor: int | None = None,
                 write_levels=(1, 2), write_scope: str = "local", read_levels=(),
                 tile_sampler: str = "partitioned"):
        """max_innermost_factor None: 4 x the target's float32 vector lanes. tile_sampler:
        "perfect" (sample_perfect_tile: factors divide the extent) or "partitioned"
        (sample_tile on spatial loops: the innermost may leave a guarded tail)."""
        if set(structure) - {"S", "R"} or "S" not in structure:
            raise ValueError(f"structure {structure!r} must be made of S and R")
        if tile_sampler not in ("perfect", "partitioned"):
            raise ValueError(f"tile_sampler {tile_sampler!r} must be 'perfect' or 'partitioned'")
        self.tile_sampler = tile_sampler
        self.structure = structure
        self.max_innermost_factor = max_innermost_factor
        self.write_levels = tuple(write_levels)
        self.write_scope = write_scope
        self.read_levels = tuple(read_levels)

    def initialize_with_tune_context(self, context) -> None:
        if self.max_innermost_factor is None:
            self.max_innermost_factor = 4 * context.target.vector_lanes_f32

    def apply(self, sch, block) -> list:
        b = sch.get(block)
        if b.name == "root" or not has_reuse(b):
            return [sch]
        kinds = loop_kinds(sch, block)
        if "O" in kinds or not kinds:
            return [sch]
        try:
            groups = self._tile(sch, block, kinds)
        except ScheduleError:
            return [sch]
        sch.annotate(block, TILED, self.structure)  # later rules leave the tiled block be
        out = []
        for level in self.write_levels or (None,):
            s = sch.copy()
            if level is not None:
                try:
                    self._write_back(s, block, groups, level)
                except ScheduleError:
                    continue
            out.append(s)
        out = out or [sch]
        if not self.read_levels:
            return out
        with_reads = []
        for s in out:
            for level in self.read_levels:
                s2 = s.copy()
                try:
                    self._read_cache(s2, block, groups, level)
                except ScheduleError:
                    continue
                with_reads.append(s2)
        return with_reads or out

    def _read_cache(self, sch, block, groups, level: int):
        """Copy each input per iteration of the last loop of the level-th reduction group."""
        r_groups = [g for c, g in groups if c == "R"]
        if level > len(r_groups) or not r_groups[level - 1]:
            raise ScheduleError("no such reduction level")
        loop = r_groups[level - 1][-1]
        for index in range(len(sch.get(block).reads)):
            cached = sch.cache_read(block, index, "global")
            sch.compute_at(cached, loop)

    def _tile(self, sch, block, kinds) -> list:
        """Split and reorder; returns the loop groups in structure order."""
        n_s, n_r = self.structure.count("S"), self.structure.count("R")
        levels = {"S": [[] for _ in range(n_s)], "R": [[] for _ in range(n_r)]}
        for loop, kind in zip(sch.get_loops(block), kinds):
            n = n_s if kind == "S" else n_r
            sample = (sch.sample_tile if kind == "S" and self.tile_sampler == "partitioned"
                      else sch.sample_perfect_tile)
            tiles = sample(loop, n=n, max_innermost_factor=self.max_innermost_factor or 64)
            for k, piece in enumerate(sch.split(loop, tiles) if n > 1 else [loop]):
                levels[kind][k].append(piece)
        count = {"S": 0, "R": 0}
        groups = []
        for c in self.structure:
            groups.append((c, levels[c][count[c]]))
            count[c] += 1
        order = [lp for _, g in groups for lp in g]
        if len(order) > 1:
            sch.reorder(*order)
        return groups

    def _write_back(self, sch, block, groups, level: int):
        """Write the block's results back at the end of the level-th spatial group."""
        s_groups = [g for c, g in groups if c == "S"]
        if level > len(s_groups) or not s_groups[level - 1]:
            raise ScheduleError("no such tiling level")
        loop = s_groups[level - 1][-1]
        consumers = sch.get_consumers(block)
        if len(consumers) == 1 and is_elementwise(sch.get(consumers[0])):
            sch.reverse_compute_at(consumers[0], loop)
            return
        cached = sch.cache_write(block, 0, self.write_scope)
        sch.reverse_compute_at(cached, loop)
