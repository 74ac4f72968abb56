"""CrossThreadReduction: on GPUs, reduce a long reduction without data reuse (softmax's max and
sum, layer_norm's mean and variance, row sums) with many threads: a thread block per output
element (row), the fused reduction loop split as k == ko * T + t with t bound to threadIdx.x.
GPU lowering turns a reduction loop bound to threadIdx into per-thread partials combined
by warp shuffles (or through shared memory where shuffles cannot be used).

The rule branches: the schedule with cross-thread reduction and the one without (where
AutoBind gives each thread whole rows), and the search decides. A reduction whose consumers
all sit in one thread block already is computed there (compute_at), with the same thread
count as the block's other stages; otherwise its elementwise consumers not scheduled yet are
moved into its thread block (reverse_compute_at) and spread over the same threads."""
from __future__ import annotations

from math import prod

from ...schedule import ScheduleError
from .analysis import has_reuse, loop_kinds
from .auto_bind import is_bound, max_threads_of
from .base import ScheduleRule

THREAD_EXTENTS = (4, 8, 16, 32, 64, 128, 256, 512)


@ScheduleRule.registry.register("cross-thread-reduction")
class CrossThreadReduction(ScheduleRule):
    """Applies to a reduction without data reuse whose reduction is at least a warp long or
    longer than its output. thread_extents: the thread counts to sample from (those beyond
    the reduction's extent rounded up to a power of two, or the target's max threads per
    block, are left out)."""

    def __init__(self, thread_extents=THREAD_EXTENTS):
        self.thread_extents = tuple(thread_extents)
        self.max_threads = 1024
        self.warp_size = 32

    def initialize_with_tune_context(self, context) -> None:
        self.max_threads = max_threads_of(context.target)
        self.warp_size = int(dict(context.target.extra).get("warp_size", 32))

    def apply(self, sch, block) -> list:
        b = sch.get(block)
        if b.name == "root" or b.init is None or has_reuse(b) or is_bound(sch, b.name):
            return [sch]
        kinds = loop_kinds(sch, block)
        loops = sch.enclosing_loops(block)
        if "R" not in kinds or "O" in kinds or any(lp.kind != "serial" for lp in loops):
            return [sch]
        space = prod(lp.extent for lp, k in zip(loops, kinds) if k == "S")
        red = prod(lp.extent for lp, k in zip(loops, kinds) if k == "R")
        if red < 2 or not (red >= self.warp_size or space < red):
            return [sch]  # short reductions over many outputs: a thread per output is better
        for attempt in (self._fused, self._standalone):
            try:
                s = attempt(sch.copy(), block, red)
            except ScheduleError:
                continue
            if s is not None:
                return [s, sch]
        return [sch]

    def _threads(self, sch, red: int):
        cap = 1 << max(0, red - 1).bit_length()  # red rounded up to a power of two
        fits = [t for t in self.thread_extents if t <= min(cap, self.max_threads)]
        if not fits:
            return min(red, self.max_threads)
        return fits[0] if len(fits) == 1 else sch.sample_categorical(fits)

    def _reduce_over_threads(self, sch, block, skip: int, threads):
        """Fuse the block's reduction loops (after the first `skip` loops), split off
        `threads` and bind them to threadIdx.x, outside the serial part: consecutive threads
        read consecutive elements."""
        loops = sch.get_loops(block)[skip:]
        kinds = loop_kinds(sch, block)[skip:]
        spatial = [lp for lp, k in zip(loops, kinds) if k == "S"]
        red = [lp for lp, k in zip(loops, kinds) if k == "R"]
        if spatial and kinds.index("R") < len(spatial):
            sch.reorder(*spatial, *red)
        fused = sch.fuse(*red) if len(red) > 1 else red[0]
        outer, inner = sch.split(fused, [None, threads])
        sch.reorder(inner, outer)
        sch.bind(inner, "threadIdx.x")

    def _fused(self, sch, block, red: int):
        """Computed in the thread block that holds all its consumers (None: there is none)."""
        target = _fusion_loop(sch, block)
        if target is None:
            return None
        threads = thread_extent_under(sch, target)
        if threads is None:
            threads = self._threads(sch, red)
        var = sch.get(target).loop_var
        sch.compute_at(block, target)
        skip = [lp.loop_var for lp in sch.enclosing_loops(block)].index(var) + 1
        self._reduce_over_threads(sch, block, skip, threads)
        return sch

    def _standalone(self, sch, block, red: int):
        """A thread block per output element; the elementwise consumers not scheduled yet
        join it (each tried on a copy: one that cannot is left to the rewrite-unbound-block
        postprocessor)."""
        kinds = loop_kinds(sch, block)
        loops = sch.get_loops(block)
        spatial = [lp for lp, k in zip(loops, kinds) if k == "S"]
        threads = self._threads(sch, red)
        if not spatial:
            self._reduce_over_threads(sch, block, 0, threads)
            return sch
        if kinds.index("R") < len(spatial):
            sch.reorder(*spatial, *[lp for lp, k in zip(loops, kinds) if k == "R"])
        bx = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        sch.bind(bx, "blockIdx.x")
        self._reduce_over_threads(sch, block, 1, threads)
        for consumer in sch.get_consumers(block):
            c = sch.get(consumer)
            if c.init is not None or is_bound(sch, c.name):
                continue
            trial = sch.copy()
            try:
                trial.reverse_compute_at(consumer, bx)
                rest = trial.get_loops(consumer)[1:]
                if rest:
                    fused = trial.fuse(*rest) if len(rest) > 1 else rest[0]
                    _, t = trial.split(fused, [None, threads])
                    trial.bind(t, "threadIdx.x")
            except ScheduleError:
                continue
            sch = trial
        return sch


def _fusion_loop(sch, block):
    """The innermost loop bound to blockIdx that encloses every consumer of `block`, or
    None."""
    consumers = sch.get_consumers(block)
    if not consumers:
        return None
    nests = [sch.enclosing_loops(c) for c in consumers]
    common = 0
    while all(len(n) > common for n in nests) and \
            len({n[common].loop_var for n in nests}) == 1:
        common += 1
    at = [i for i, lp in enumerate(nests[0][:common])
          if lp.kind == "thread_binding" and lp.thread.startswith("blockIdx")]
    if not at:
        return None
    return sch.get_loops(consumers[0])[at[-1]]


def thread_extent_under(sch, loop):
    """The thread count (a sampled value or an int) that split off a loop bound to
    threadIdx.x under `loop`, as the trace recorded it; None if there is none."""
    var = sch.get(loop).loop_var
    bound = {inst.inputs[0] for inst in sch.trace.insts
             if inst.kind.name == "Bind" and inst.attrs[0] == "threadIdx.x"}
    for inst in sch.trace.insts:
        if inst.kind.name != "Split":
            continue
        for out, factor in zip(inst.outputs, inst.inputs[1:]):
            if out not in bound or factor is None:
                continue
            if not sch.exists(out) or all(getattr(p, "loop_var", None) is not var
                                          for p in sch.parents(out)):
                continue
            return factor
    return None
