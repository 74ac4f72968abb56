"""RewriteParallelVectorizeUnroll: apply the root block's parallel / vectorize annotations
(from ParallelizeVectorizeUnroll) to the final loops.

Parallel: in each top-level loop nest, fuse the longest perfect prefix of data-parallel loops
whose total extent stays within the limit (at least the first loop) and parallelize it.
Vectorize: every block's innermost loop, when it is spatial: whole within the limit; a longer
one is split by its largest divisor within the limit (at least MIN_VECTOR_SPLIT) and its inner
part vectorized. Left to the C compiler, such a loop (an elementwise consumer fused above the
register tiles: relu(x@W+b)'s 256 outputs) was unrolled into scalar statements that GCC did
not vectorize again (a NaN-propagating max defeats its straight-line vectorizer)."""
from __future__ import annotations

from math import prod

from ...schedule import ScheduleError
from ...tir.functor import collect_realizes, uses_var
from ...tir.intrin import TENSORIZE
from ...tir.stmt import For
from ..schedule_rule.parallel_vectorize_unroll import PARALLEL, VECTORIZE
from .base import Postproc

MIN_VECTOR_SPLIT = 8  # the narrowest inner part a loop longer than the limit is split into


def _data_parallel(loop: For) -> bool:
    for br in collect_realizes(loop.body):
        for iv, v in zip(br.block.iter_vars, br.iter_values):
            if iv.kind == "R" and uses_var(v, {loop.loop_var}):
                return False
    return True


@Postproc.registry.register("rewrite-parallel-vectorize-unroll")
class RewriteParallelVectorizeUnroll(Postproc):
    """Turns the root block's parallel and vectorize annotations into parallel and vectorized
    loops where that is legal, and removes them; keeps every schedule. (The unroll annotation
    stays for lowering to apply.)"""

    def apply(self, sch) -> bool:
        root = sch.get_block("root")
        ann = dict(sch.get(root).annotations)
        max_par, max_vec = ann.get(PARALLEL), ann.get(VECTORIZE)
        if max_par is None and max_vec is None:
            return True
        for key in (PARALLEL, VECTORIZE):
            if key in ann:
                sch.unannotate(root, key)
        names = [b.name for b in (sch.get(x) for x in sch.get_child_blocks(root))]
        done_outer = set()
        for name in names:
            block = sch.get_block(name)
            loops = sch.get_loops(block)
            if not loops:
                continue
            if max_par and sch.get(loops[0]).loop_var not in done_outer:
                done_outer.add(sch.get(loops[0]).loop_var)
                self._parallelize(sch, loops, max_par)
            if max_vec:
                self._vectorize(sch, sch.get_loops(block), max_vec)
        return True

    @staticmethod
    def _parallelize(sch, loops, max_par: int):
        nodes = [sch.get(lp) for lp in loops]
        n = 0
        while n < len(nodes):
            x = nodes[n]
            if x.kind != "serial" or not _data_parallel(x):
                break
            if n > 0 and (nodes[n - 1].body is not x or prod(y.extent for y in nodes[:n + 1]) > max_par):
                break
            n += 1
        if n == 0:
            return
        try:
            fused = sch.fuse(*loops[:n]) if n > 1 else loops[0]
            sch.parallel(fused)
        except ScheduleError:
            pass

    @staticmethod
    def _vectorize(sch, loops, max_vec: int):
        inner = sch.get(loops[-1])
        if inner.kind != "serial" or inner.extent < 2 or not _data_parallel(inner):
            return
        if any(sch.get(lp).annotation(TENSORIZE) is not None for lp in loops):
            return  # the tensor intrinsic computes the nest
        loop = loops[-1]
        try:
            if inner.extent > max_vec:
                factor = max((f for f in range(MIN_VECTOR_SPLIT, max_vec + 1)
                              if inner.extent % f == 0), default=None)
                if factor is None:
                    return
                loop = sch.split(loop, [inner.extent // factor, factor])[1]
            sch.vectorize(loop)
        except ScheduleError:
            pass
