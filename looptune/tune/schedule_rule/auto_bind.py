"""AutoBind: on GPUs, bind a block no other rule scheduled (elementwise, injective, or a
reduction left serial) to threads: its outer spatial loops fused, split by a sampled thread
count, the parts bound to blockIdx.x / threadIdx.x. `bind_block_threads` is shared with the
rewrite-unbound-block postprocessor, which binds what is still unbound with a fixed count."""
from __future__ import annotations

from ...tir.stmt import For
from .analysis import loop_kinds
from .base import ScheduleRule

THREAD_EXTENTS = (32, 64, 128, 256, 512, 1024)


def is_bound(sch, name: str) -> bool:
    """Does block `name` sit under a loop bound to a GPU thread axis?"""
    return any(lp.kind == "thread_binding" for lp in sch.enclosing_loops(name))


def max_threads_of(target) -> int:
    return int(dict(target.extra).get("max_threads_per_block", 1024))


def bind_block_threads(sch, block, choose_threads, max_blocks: int = 256) -> None:
    """Fuse the block's outer spatial loops (down to the first reduction loop or the first loop
    holding more than one statement), split the result (fused == (o * B + b) * T + t) and bind
    b to blockIdx.x, t to threadIdx.x; o (a serial loop around the grid) is there only when the
    extent exceeds `max_blocks` x the largest thread count. `choose_threads(extent)` gives T
    (an int or a sampled value) and the largest value it can take. A block without spatial
    loops gets a unit loop bound to blockIdx.x: one thread runs it."""
    loops = sch.get_loops(block)
    kinds = loop_kinds(sch, block)
    n = 0
    for loop, kind in zip(loops, kinds):
        if kind != "S":
            break
        n += 1
        if not isinstance(sch.get(loop).body, For):
            break
    if n == 0:
        sch.bind(sch.add_unit_loop(loops[0] if loops else block), "blockIdx.x")
        return
    fused = sch.fuse(*loops[:n]) if n > 1 else loops[0]
    extent = sch.get(fused).extent
    threads, most = choose_threads(extent)
    if max_blocks and extent > max_blocks * most:
        _, bx, tx = sch.split(fused, [None, max_blocks, threads])
    else:
        bx, tx = sch.split(fused, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")


def waits_for_fusion(sch, b) -> bool:
    """An injective block that reads the result of a reduction not scheduled yet: the rule
    visiting that reduction (multi-level tiling, cross-thread reduction) may fuse it there,
    and the rewrite-unbound-block postprocessor binds it if none does."""
    if b.init is not None:
        return False
    reads = {r.buffer for r in b.reads}
    for name in sch.block_names():
        p = sch.realize(name).block
        if p.init is not None and any(w.buffer in reads for w in p.writes) \
                and not is_bound(sch, name):
            return True
    return False


@ScheduleRule.registry.register("auto-bind")
class AutoBind(ScheduleRule):
    """thread_extents: the thread counts to sample from (those above the fused extent or the
    target's max threads per block are left out). max_blocks: blockIdx.x extent beyond which
    a serial loop runs the grid several times."""

    def __init__(self, thread_extents=THREAD_EXTENTS, max_blocks: int = 256):
        self.thread_extents = tuple(thread_extents)
        self.max_blocks = max_blocks
        self.max_threads = 1024

    def initialize_with_tune_context(self, context) -> None:
        self.max_threads = max_threads_of(context.target)

    def apply(self, sch, block) -> list:
        b = sch.get(block)
        if b.name == "root" or is_bound(sch, b.name) or waits_for_fusion(sch, b):
            return [sch]
        bind_block_threads(sch, block, lambda extent: self._threads(sch, extent),
                           self.max_blocks)
        return [sch]

    def _threads(self, sch, extent: int):
        fits = [t for t in self.thread_extents if t <= min(extent, self.max_threads)]
        if not fits:
            t = min(extent, self.max_threads, max(self.thread_extents, default=extent))
            return t, t
        if len(fits) == 1:
            return fits[0], fits[0]
        return sch.sample_categorical(fits), max(fits)

    def __repr__(self):
        return f"AutoBind(thread_extents={self.thread_extents}, max_blocks={self.max_blocks})"
