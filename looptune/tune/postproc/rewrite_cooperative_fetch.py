"""RewriteCooperativeFetch: the threads of a GPU block share the copy of an input tile into
shared memory (from MultiLevelTiling's "meta_schedule.cooperative_fetch" annotation): the
copy's loops are fused and split as fused == (o * T + t) * V + v, t bound to threadIdx.x
with T the thread count of the block's computation, v vectorized with the sampled length V
(float4 loads for V = 4 where the addresses allow), o serial.

Why a postprocessor and not the rule itself: T is the product of the sampled tile sizes of
the thread level, and the copy's extent depends on the sampled tiles too. A split written by
the rule would record today's numbers as constants in the trace, and a mutated tile size
would replay with a stale T (idle or missing threads, or a guard on every copy). Done here,
after the decisions are final, the split always matches the loops it is applied to; the
trace keeps only the annotation (with the vector length as a decision)."""
from __future__ import annotations

from ...schedule import ScheduleError
from ...tir.functor import collect_realizes
from ..schedule_rule.multi_level_tiling import COOPERATIVE_FETCH
from .base import Postproc


@Postproc.registry.register("rewrite-cooperative-fetch")
class RewriteCooperativeFetch(Postproc):
    """Turns every cooperative-fetch annotation into the thread-bound, vectorized copy that
    the module docstring describes; keeps every schedule."""

    def apply(self, sch) -> bool:
        names = [name for name in sch.block_names()
                 if sch.realize(name).block.annotation(COOPERATIVE_FETCH) is not None]
        for name in names:
            block = sch.get_block(name)
            vec = int(sch.get(block).annotation(COOPERATIVE_FETCH))
            sch.unannotate(block, COOPERATIVE_FETCH)
            self._rewrite(sch, block, name, vec)
        return True

    @staticmethod
    def _rewrite(sch, block, name: str, vec: int):
        parents = sch.enclosing_loops(name)
        threads = max((p.extent for p in parents
                       if p.kind == "thread_binding" and p.thread == "threadIdx.x"), default=0)
        # the copy's own loops: the innermost serial loops that hold this block alone
        n = 0
        for p in reversed(parents):
            if p.kind != "serial" or [br.block.name for br in collect_realizes(p.body)] != [name]:
                break
            n += 1
        if n == 0 or threads == 0:
            return  # nothing to share: the copy stays as it is
        loops = sch.get_loops(block)[-n:]
        fused = sch.fuse(*loops) if n > 1 else loops[0]
        if vec > 1:
            _, t, v = sch.split(fused, [None, threads, vec])
            sch.bind(t, "threadIdx.x")
            try:
                sch.vectorize(v)
            except ScheduleError:
                pass  # lowering copies element by element
        else:
            _, t = sch.split(fused, [None, threads])
            sch.bind(t, "threadIdx.x")
