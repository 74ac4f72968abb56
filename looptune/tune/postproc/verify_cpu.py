"""VerifyCPU: reject schedules whose lowered code would be invalid or pathological on a CPU:
vector loops wider than the limit, or local buffers too large for a thread's stack."""
from __future__ import annotations

from ...tir import dtype as dt
from ...tir.functor import visit
from ...tir.stmt import Allocate, For
from .base import Postproc


@Postproc.registry.register("verify-cpu")
class VerifyCPU(Postproc):
    def __init__(self, max_vector_lanes: int = 64, max_local_bytes: int = 1 << 20):
        self.max_vector_lanes = max_vector_lanes
        self.max_local_bytes = max_local_bytes

    def apply(self, sch) -> bool:
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
        visit(sch.lowered().body, fn)  # local buffer sizes are known once compacted
        return not bad
