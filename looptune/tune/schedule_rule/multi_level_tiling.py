"""MultiLevelTiling: tile a reduction with data reuse (matmul, conv) by a structure string.

"SSRSRS" (the CPU default) splits every spatial loop into 4 and every reduction loop into 2
with sample_perfect_tile, and orders the pieces S0 S1 R0 S2 R1 S3: the innermost S3 x R1 is
the register tile, S2 x R1 its cache block. The result is written back per tile at a
sampled level: by fusing an elementwise consumer there (reverse_compute_at), or through a
local cache_write (the accumulator tile that lowering turns into a stack array). With
`read_levels`, each input is also copied per tile (cache_read + compute_at at the end of that
reduction group), which lowering compacts into a contiguous packed panel.

On GPUs (MetaSchedule's CUDA configuration) the structure is "SSSRRSRS" with
tile_binds=("blockIdx.x", "vthread.x", "threadIdx.x"): the first three spatial levels are
fused and bound, so S0 picks the thread block, S1 the virtual thread and S2 the thread; the
inputs are copied into "shared" tiles once per outer reduction step (read_levels=(1,)) and
the accumulator is a "local" (register) tile written back per thread (write_levels=(3,),
write_reuse="must"). The copy into shared memory is marked for cooperative fetching and
finished by the rewrite-cooperative-fetch postprocessor (see there for why).
"""
from __future__ import annotations

from ...codegen.passes.prefetch import PREFETCH
from ...schedule import ScheduleError
from .analysis import (channel_vector_axis, has_reuse, is_elementwise, loop_kinds,
                       vector_reads)
from .base import ScheduleRule

GPU_MAX_VTHREADS = 8  # verify-gpu-code's default limit
GPU_MAX_ACCUMULATORS = 64  # outputs one thread keeps in registers per register level


def _root(limit: int, n: int) -> int:
    """The largest power of two p with p ** n <= limit."""
    p = 1
    while (2 * p) ** max(n, 1) <= limit:
        p *= 2
    return p


def _moved_last(ndim: int, axis: int) -> list:
    """The axis order with `axis` moved last."""
    return [d for d in range(ndim) if d != axis] + [axis]


TILED = "meta_schedule.tiling_structure"
PREFETCH_DISTANCES = (0, 1)  # row tiles ahead (0: no prefetch), for prefetch=PREFETCH_DISTANCES
COOPERATIVE_FETCH = "meta_schedule.cooperative_fetch"  # value: the vector length of the copy


@ScheduleRule.registry.register("multi-level-tiling")
class MultiLevelTiling(ScheduleRule):
    """Tiles every block with data reuse by `structure` (module docstring), one space per
    write level (and read level), the tile sizes left to the search; marks the block tiled so
    later rules leave it be. Blocks without reuse, or scheduled already, pass through
    unchanged."""

    def __init__(self, structure: str = "SSRSRS", max_innermost_factor: int | None = None,
                 write_levels=(1, 2), write_scope: str = "local", read_levels=(),
                 tile_sampler: str = "partitioned", *, tile_binds=(), read_scope: str = "global",
                 write_reuse: str = "may", vector_load_lens=(), channel_vectors: bool = False,
                 max_innermost_reduction: int | None = None, read_operands=("all",),
                 prefetch=(), intrinsics: dict | None = None):
        """max_innermost_factor None: 4 x the target's float32 vector lanes.
        max_innermost_reduction: the same limit for reduction loops (the reduction steps
        between two loads and stores of the register tile; None: max_innermost_factor), which
        need not be a vector's multiple. tile_sampler:
        "perfect" (sample_perfect_tile: factors divide the extent) or "partitioned"
        (sample_tile on spatial loops: the innermost may leave a guarded tail).
        tile_binds: thread axes for the first levels of the structure (spatial ones), each
        level's loops fused and bound. write_reuse "may": an elementwise consumer is fused at
        the write level instead of a cache; "must": always a `write_scope` cache, and a sole
        unscheduled elementwise consumer is inlined into its write-back. vector_load_lens: the
        vector lengths a cooperative fetch into "shared" samples from. read_levels: one
        space per level, the inputs copied per iteration of that reduction group's last loop
        (None: a space without copies). read_operands: which inputs each read level copies,
        one space each: "all", or "vector": only those the innermost spatial loop indexes
        (loaded as vectors; the others are broadcast from where they are: a matmul's A, copied
        per tile inside the j loops, was copied again for every column tile). channel_vectors (CPU):
        where the innermost loop is a poor vector axis and another is a good one
        (analysis.channel_vector_axis: a stride-2 conv's x and its output channel k), also
        offer spaces with that loop innermost, its weight copied per tile into a panel with
        that axis last, and the accumulators stored likewise. prefetch (CPU): the distances
        (in row tiles) the search picks from for prefetching the inputs read in place
        (see _prefetch; e.g. PREFETCH_DISTANCES; empty, the default: no prefetch and no
        decision. Off because it measured within noise: benchmarks/prefetch_effect.py).
        intrinsics (CPU): the options of MultiLevelTilingWithIntrin (multi_level_tiling_intrin
        .py): a block one of the target's tensor intrinsics computes (int8, bf16) also gets
        the spaces tiled around it, ahead of the plain ones (one rule, so that the plain
        spaces' traces stay as they were)."""
        if set(structure) - {"S", "R"} or "S" not in structure:
            raise ValueError(f"structure {structure!r} must be made of S and R")
        if tile_sampler not in ("perfect", "partitioned"):
            raise ValueError(f"tile_sampler {tile_sampler!r} must be 'perfect' or 'partitioned'")
        if set(structure[:len(tile_binds)]) - {"S"}:
            raise ValueError(f"tile_binds {tuple(tile_binds)} bind the first levels of "
                             f"{structure!r}, which must be spatial (S)")
        if write_reuse not in ("may", "must"):
            raise ValueError(f"write_reuse {write_reuse!r} must be 'may' or 'must'")
        self.tile_sampler = tile_sampler
        self.structure = structure
        self.max_innermost_factor = max_innermost_factor
        self.max_innermost_reduction = max_innermost_reduction
        self.write_levels = tuple(write_levels)
        self.write_scope = write_scope
        self.read_levels = tuple(read_levels)
        if set(read_operands) - {"all", "vector"} or not read_operands:
            raise ValueError(f"read_operands {tuple(read_operands)} must be 'all' and/or "
                             "'vector'")
        self.read_operands = tuple(read_operands)
        self.tile_binds = tuple(tile_binds)
        self.read_scope = read_scope
        self.write_reuse = write_reuse
        self.vector_load_lens = tuple(vector_load_lens)
        self.channel_vectors = channel_vectors
        self.prefetch = tuple(int(d) for d in prefetch)
        self.intrinsics = dict(intrinsics) if intrinsics is not None else None
        self._units = None

    def initialize_with_tune_context(self, context) -> None:
        if self.max_innermost_factor is None:
            self.max_innermost_factor = 4 * context.target.vector_lanes_f32
        if self.max_innermost_reduction is None:
            self.max_innermost_reduction = self.max_innermost_factor
        self.target = context.target
        if self.intrinsics is not None:
            from .multi_level_tiling_intrin import MultiLevelTilingWithIntrin
            self._units = MultiLevelTilingWithIntrin(**self.intrinsics, keep_plain=False)
            self._units.initialize_with_tune_context(context)

    def apply(self, sch, block) -> list:
        units = self._units.unit_spaces(sch, block) if self._units is not None else []
        return units + self._plain(sch, block)

    def _plain(self, sch, block) -> list:
        b = sch.get(block)
        if b.name == "root" or not has_reuse(b) or b.annotation(TILED) is not None:
            return [sch]
        kinds = loop_kinds(sch, block)
        if "O" in kinds or not kinds:
            return [sch]
        if any(lp.kind != "serial" for lp in sch.enclosing_loops(block)):
            return [sch]  # scheduled already (bound, parallel, ...)
        variant = self._channel_vector_spaces(sch, block, kinds)
        n_reads = len(sch.get(block).reads)
        copies = []  # the inputs each read space copies
        for which in self.read_operands:
            only = frozenset(range(n_reads)) if which == "all" else vector_reads(sch, block)
            if only and only not in copies:
                copies.append(only)
        try:
            groups = self._tile(sch, block, kinds)
        except ScheduleError:
            return [sch] + variant
        sch.annotate(block, TILED, self.structure)  # later rules leave the tiled block be
        self._prefetch(sch, groups)
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
            return out + variant
        with_reads = []
        for s in out:
            for level in self.read_levels:
                if level is None:  # a space without copies
                    with_reads.append(s)
                    continue
                for only in copies:
                    s2 = s.copy()
                    try:
                        self._read_cache(s2, block, groups, level, only)
                    except ScheduleError:
                        continue
                    with_reads.append(s2)
        return (with_reads or out) + variant

    def _channel_vector_spaces(self, sch, block, kinds) -> list:
        """The spaces with a better vector axis innermost (see channel_vectors), one per
        write level: tiled as usual but for that loop's innermost piece, placed last; each
        weight that indexes it elsewhere than last copied per S1 tile into a panel that has
        it last; the accumulators a local tile that has it last too."""
        if not self.channel_vectors or self.tile_binds:
            return []
        params = sch.func.params
        found = channel_vector_axis(sch, block, self.target.vector_lanes_f32, params)
        if found is None:
            return []
        pos, packs, out_dim = found
        spaces = []
        for level in self.write_levels:
            s = sch.copy()
            try:
                groups = self._tile(s, block, kinds, last=pos)
                s.annotate(block, TILED, self.structure)
                self._prefetch(s, groups)
                s_groups = [g for c, g in groups if c == "S"]
                for buf, dim in packs:
                    index = [r.buffer for r in s.get(block).reads].index(buf)
                    cached = s.cache_read(block, index, "global")
                    s.permute_layout(cached, 0, _moved_last(buf.ndim, dim))
                    s.compute_at(cached, s_groups[1][-1] if len(s_groups) > 1 else
                                 s_groups[0][-1])
                self._write_back(s, block, groups, level, last_axis=out_dim)
            except ScheduleError:
                continue
            spaces.append(s)
        return spaces

    def _prefetch(self, sch, groups):
        """CPU: whether each row tile prefetches what the next one reads of the inputs it
        does not copy (codegen/passes/prefetch.py), a sampled choice on the loops of the
        third spatial level (the first of them that remains after unit loops are dropped
        does it)."""
        s_groups = [g for c, g in groups if c == "S"]
        if self.tile_binds or not self.prefetch or len(s_groups) < 3 or not s_groups[2]:
            return
        ahead = sch.sample_categorical(list(self.prefetch))
        for loop in s_groups[2]:
            sch.annotate(loop, PREFETCH, ahead)

    def _read_cache(self, sch, block, groups, level: int, only=None):
        """Copy each input (those at the positions `only`) per iteration of the last loop of
        the level-th reduction group."""
        r_groups = [g for c, g in groups if c == "R"]
        if level > len(r_groups) or not r_groups[level - 1]:
            raise ScheduleError("no such reduction level")
        loop = r_groups[level - 1][-1]
        for index in range(len(sch.get(block).reads)):
            if only is not None and index not in only:
                continue
            cached = sch.cache_read(block, index, self.read_scope)
            sch.compute_at(cached, loop)
            if self.read_scope == "shared":
                self._mark_cooperative(sch, cached)

    def _mark_cooperative(self, sch, cached):
        lens = self.vector_load_lens or (1,)
        vec = lens[0] if len(lens) == 1 else sch.sample_categorical(list(lens))
        sch.annotate(cached, COOPERATIVE_FETCH, vec)

    def _tile(self, sch, block, kinds, *, last: int | None = None, loops=None,
              tail=()) -> list:
        """Split and reorder (and bind the first levels to tile_binds); returns the loop
        groups in structure order. `last`: the position of the loop whose innermost piece
        goes last (by default the pieces keep the loops' order). `loops` (with `kinds`): the
        loops to tile, by default the block's; `tail`: loops kept innermost, as they are."""
        n_s, n_r = self.structure.count("S"), self.structure.count("R")
        levels = {"S": [[] for _ in range(n_s)], "R": [[] for _ in range(n_r)]}
        loops = sch.get_loops(block) if loops is None else loops
        n_axes = sum(1 for lp, kind in zip(loops, kinds) if kind == "S" and sch.get(lp).extent > 1)
        last_piece = None
        for pos, (loop, kind) in enumerate(zip(loops, kinds)):
            n = n_s if kind == "S" else n_r
            inner = (self.max_innermost_reduction if kind == "R" and not self.tile_binds
                     else self.max_innermost_factor) or 64
            if self.tile_binds and n > 1:  # GPU: every level within the launch's limits
                tiles = sch.sample_perfect_tile(loop, n=n, max_innermost_factor=inner,
                                                max_factors=self._gpu_caps(kind, n, n_axes))
            elif kind == "S" and self.tile_sampler == "partitioned":
                tiles = sch.sample_tile(loop, n=n, max_innermost_factor=inner)
            else:
                tiles = sch.sample_perfect_tile(loop, n=n, max_innermost_factor=inner)
            for k, piece in enumerate(sch.split(loop, tiles) if n > 1 else [loop]):
                levels[kind][k].append(piece)
            if pos == last:
                last_piece = levels[kind][n - 1][-1]
        if last_piece is not None:
            inner = levels["S"][n_s - 1]
            inner.remove(last_piece)
            inner.append(last_piece)
        count = {"S": 0, "R": 0}
        groups = []
        for c in self.structure:
            groups.append((c, levels[c][count[c]]))
            count[c] += 1
        order = [lp for _, g in groups for lp in g] + list(tail)
        if len(order) > 1:
            sch.reorder(*order)
        for k, axis in enumerate(self.tile_binds):
            c, loops = groups[k]
            fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
            sch.bind(fused, axis)
            groups[k] = (c, [fused])
        return groups

    def _gpu_caps(self, kind: str, n: int, n_axes: int) -> list:
        """Per-level limits of one loop's tiles on a GPU, from the target's limits shared
        evenly by the block's `n_axes` spatial loops (powers of two): the thread block level
        is free, the virtual-thread level within GPU_MAX_VTHREADS, the thread level within
        max_threads_per_block, each register level within GPU_MAX_ACCUMULATORS; reduction
        levels (the shared tile's depth) within the innermost factor, the outermost free.
        Uniform draws under these limits pass verify-gpu-code most of the time, where
        scattering the primes of 4096 over five levels almost never does."""
        inner = self.max_innermost_factor or 64
        if kind == "R":
            return [None] + [min(inner, 8)] * (n - 2) + [inner]
        caps = []
        for k in range(n):
            tag = self.tile_binds[k] if k < len(self.tile_binds) else None
            if tag is None:
                caps.append(_root(GPU_MAX_ACCUMULATORS, n_axes))
            elif tag.startswith("vthread"):
                caps.append(_root(GPU_MAX_VTHREADS, n_axes))
            elif tag.startswith("threadIdx"):
                caps.append(_root(self.target.max_threads_per_block, n_axes))
            else:
                caps.append(None)
        caps[-1] = min(caps[-1], inner) if caps[-1] is not None else inner
        return caps

    def _write_back(self, sch, block, groups, level: int, *, last_axis: int | None = None):
        """Write the block's results back at the end of the level-th spatial group.
        `last_axis`: always through a local cache, stored with that axis last."""
        s_groups = [g for c, g in groups if c == "S"]
        if level > len(s_groups) or not s_groups[level - 1]:
            raise ScheduleError("no such tiling level")
        loop = s_groups[level - 1][-1]
        consumers = sch.get_consumers(block)
        fusible = len(consumers) == 1 and is_elementwise(sch.get(consumers[0]))
        if fusible and self.write_reuse == "may" and last_axis is None:
            sch.reverse_compute_at(consumers[0], loop)
            return
        cached = sch.cache_write(block, 0, self.write_scope)
        if last_axis is not None:
            ndim = sch.get(block).writes[0].buffer.ndim
            sch.permute_layout(block, 0, _moved_last(ndim, last_axis))
        sch.reverse_compute_at(cached, loop)
        if fusible and all(lp.kind == "serial"
                           for lp in sch.enclosing_loops(consumers[0])):
            try:
                sch.reverse_compute_inline(consumers[0])
            except ScheduleError:
                pass  # the consumer stays a stage of its own
