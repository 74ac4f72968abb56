"""Software prefetch: a loop annotated PREFETCH = d fetches, at the top of each iteration,
the cache lines that iteration v + d will read from the function's arguments.

Where a register tile broadcasts an operand that is not copied into a packed panel (a
matmul's A, read in place), each new row tile starts on other pages (rows 4 KB apart in a
1024-wide matrix), where the hardware prefetchers, which stay within a page, do not reach.
Multi-level tiling's `prefetch` option lets the search pick d per tiled block (0: none); it
is off by default, as the same kernels with and without measured within noise on a Zen 4
(benchmarks/prefetch_effect.py: medians 0.985-1.007).

The region read per iteration is taken per argument from its loads' indices, bounded over
the loops inside (tir.arith.eval_bound): the rows of every dimension but the last, and the
lines of the last. An argument whose region does not move with the loop, is not a box of
constant extents, or would take more than MAX_LINES prefetches is left alone. Prefetches are
hints: they never fault, and the interpreter never sees them (only compiled code is given
them)."""
from __future__ import annotations

import itertools

from ...tir import dtype as dt
from ...tir.arith import Simplifier, const_extent, eval_bound
from ...tir.expr import PREFETCH_OP, BufferLoad, Call, binary, const
from ...tir.functor import map_children, substitute, uses_var, visit
from ...tir.stmt import Evaluate, For, IfThenElse, seq
from ...tir.structural import structural_equal
from .common import inside

PREFETCH = "meta_schedule.software_prefetch"  # a loop's annotation: iterations ahead (0: none)
LINE_BYTES = 64
MAX_LINES = 32  # prefetches per iteration and argument


def prefetch_next(body, params) -> object:
    """`body` with the prefetches its annotated serial loops ask for (the outermost of nested
    ones; a parallel loop's next iteration is another thread's)."""
    params = set(params)

    def walk(s, dom):
        if isinstance(s, For):
            d = int(s.annotation(PREFETCH, 0) or 0)
            if d > 0 and s.extent > d and s.kind in ("serial", "unrolled"):
                return _with_prefetches(s, d, params, dom)
            inner = inside(dom, s)
            return map_children(s, lambda x: walk(x, inner))
        return map_children(s, lambda x: walk(x, dom))

    return walk(body, {})


def _with_prefetches(loop: For, d: int, params: set, dom: dict) -> For:
    loads = _loads(loop.body, params)
    inner = _inner_ranges(loop.body)
    here = inside(dom, loop)
    ahead = {loop.loop_var: binary("+", loop.loop_var, const(d, loop.loop_var.dtype))}
    fetches = []
    for buf, index_lists in loads.items():
        box = _box(index_lists, inner, here)
        if box is None or not any(uses_var(lo, {loop.loop_var}) for lo, _ in box):
            continue
        next_box = [(substitute(lo, ahead), const_extent(lo, hi, here)) for lo, hi in box]
        fetches += _lines(buf, next_box, here)
    if not fetches:
        return loop
    guard = binary("<", loop.loop_var, const(loop.extent - d, loop.loop_var.dtype))
    body = seq(IfThenElse(guard, seq(*fetches)), loop.body)
    return For(loop.loop_var, loop.extent, loop.kind, body, loop.thread, loop.annotations)


def _loads(body, params: set) -> dict:
    """{argument: [indices of each load]} of the arguments `body` reads."""
    out: dict = {}

    def fn(n):
        if isinstance(n, BufferLoad) and n.buffer in params and \
                all(dt.lanes(i.dtype) == 1 for i in n.indices):
            out.setdefault(n.buffer, []).append(n.indices)

    visit(body, fn)
    return out


def _inner_ranges(body) -> dict:
    """{loop var: (0, extent - 1)} of every loop in `body`."""
    out = {}

    def fn(n):
        if isinstance(n, For):
            out[n.loop_var] = (0, n.extent - 1)

    visit(body, fn)
    return out


def _box(index_lists, relax: dict, dom: dict):
    """[(lo, hi)] per dimension covering every load, or None where one has no bound."""
    box = None
    for indices in index_lists:
        bounds = []
        for idx in indices:
            b = eval_bound(idx, relax, dom)
            if b is None:
                return None
            bounds.append(b)
        if box is None:
            box = bounds
        elif any(not _same(a, b) for a, b in zip(box, bounds)):
            box = [(binary("min", a[0], b[0]), binary("max", a[1], b[1]))
                   for a, b in zip(box, bounds)]
    return box


def _same(a, b) -> bool:
    return structural_equal(a[0], b[0]) and structural_equal(a[1], b[1])


def _lines(buf, box, dom: dict) -> list:
    """Prefetches of every line of the box [(lo, extent)] of `buf` (none if too many)."""
    if not box or any(n is None for _, n in box):
        return []
    per_line = max(1, LINE_BYTES // max(1, dt.bits(buf.dtype) // 8))
    *rows, (lo_last, n_last) = box
    steps = list(range(0, n_last, per_line))
    if n_last - 1 not in steps:
        steps.append(n_last - 1)  # the box may start mid-line: its last line too
    n_rows = 1
    for _, n in rows:
        n_rows *= n
    if n_rows * len(steps) > MAX_LINES:
        return []
    simp = Simplifier(dom)
    out = []
    for offsets in itertools.product(*(range(n) for _, n in rows)):
        head = [simp(binary("+", lo, const(o, lo.dtype))) for (lo, _), o in zip(rows, offsets)]
        for k in steps:
            idx = simp(binary("+", lo_last, const(k, lo_last.dtype)))
            out.append(Evaluate(Call(PREFETCH_OP, (BufferLoad(buf, tuple(head) + (idx,),
                                                               buf.dtype),), "int32")))
    return out
