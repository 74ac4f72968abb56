"""VerifyCPU: reject schedules whose lowered code would be invalid or pathological on a CPU:
vector loops wider than the limit, local buffers too large for a thread's stack, or register
tiles (the accumulator a multi-level-tiled block updates inside its innermost reduction loop)
larger than the Target's vector register file."""
from __future__ import annotations

from math import prod

from ...backend import Backend
from ...tir import dtype as dt
from ...tir.functor import visit
from ...tir.stmt import Allocate, For
from ..schedule_rule.analysis import loop_kinds
from ..schedule_rule.multi_level_tiling import TILED
from .base import Postproc


@Postproc.registry.register("verify-cpu")
class VerifyCPU(Postproc):
    """`max_register_tile`: elements of a register tile (None: the Target's vector registers
    times its float32 lanes, 512 with AVX-512 and 128 with AVX2; 0: no limit)."""

    def __init__(self, max_vector_lanes: int = 64, max_local_bytes: int = 1 << 20,
                 max_register_tile: int | None = None):
        self.max_vector_lanes = max_vector_lanes
        self.max_local_bytes = max_local_bytes
        self.max_register_tile = max_register_tile
        self.target = None  # the tune context's (None: this machine)

    def initialize_with_tune_context(self, context) -> None:
        self.target = context.target
        if self.max_register_tile is None:
            t = context.target
            self.max_register_tile = t.vector_registers * t.vector_lanes_f32

    def apply(self, sch) -> bool:
        if self.max_register_tile and not self._register_tiles_fit(sch):
            return False
        bad = []

        def fn(n):
            if isinstance(n, For) and n.kind == "vectorized" and n.extent > self.max_vector_lanes:
                bad.append(n)
            elif isinstance(n, Allocate) and n.buffer.scope == "local" and \
                    n.buffer.size * dt.nbytes(n.buffer.dtype) > self.max_local_bytes:
                bad.append(n)

        visit(sch.func.body, fn)
        if bad:
            return False
        # local buffer sizes are known once compacted
        visit(Backend.for_target(self.target or "cpu").lower_loops(sch).body, fn)
        return not bad

    def _register_tiles_fit(self, sch) -> bool:
        for name in sch.block_names():
            if sch.realize(name).block.annotation(TILED) is None:
                continue
            kinds = loop_kinds(sch, name)
            loops = sch.enclosing_loops(name)
            if "R" not in kinds:
                continue
            last_r = max(i for i, k in enumerate(kinds) if k == "R")
            tile = prod(lp.extent for lp, k in zip(loops[last_r + 1:], kinds[last_r + 1:])
                        if k == "S")
            if tile > self.max_register_tile:
                return False
        return True
