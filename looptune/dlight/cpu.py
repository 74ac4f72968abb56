"""The CPU default schedule (one rule: "cpu-default"), a reasonable kernel with zero search:

- Elementwise stages without conditions are inlined into the stage that reads them.
- A reduction with reuse (matmul, convolution) gets a register tile of 8 accumulators (up
  to 16 with AVX-512's 32 registers): the spatial loop its accesses follow contiguously
  split into two vectors of the target's width (four when there is no other long spatial
  loop) and the last other long spatial loop into 4 rows (with 32 registers up to 8, a
  divisor of its extent); the reduction loops go between the tile and the rest (short window
  loops unrolled), with the blocks of the vector axis outermost (a weight panel stays in
  cache); the tile accumulates in a buffer of its own and its elementwise epilogue is
  applied while it is written back. Its outer spatial loops run in parallel.
- A reduction along its innermost loop (softmax, layer_norm, mean): rfactored into a
  vector of partial results, which vectorizes, then reduced.
- A short window reduction (pooling): its window loops moved outside the last spatial loop,
  which vectorizes.
- Other stages: the innermost loop vectorized when it is long enough, the outer ones
  parallel.
- A model's constant weights are packed in the order the tiles read them (RewriteLayout).
- A reduction a tensor intrinsic of the target computes (int8, bf16): tiled around the best
  such unit instead (cpu_intrin.py).

Its traces are pinned (tests/golden/dlight_cpu_traces.json): a change here changes every
untuned kernel of every compiled model.
"""
from __future__ import annotations

from ..schedule import Schedule, ScheduleError
from ..tune.schedule_rule.analysis import has_reuse, has_select, is_elementwise, loop_kinds
from .base import Rule, start
from .cpu_intrin import tile_with_intrinsic
from .base import block_names as _block_names, extent as _extent, ok as _ok, try_ as _try


@Rule.registry.register("cpu-default")
class CpuDefault(Rule):
    """Applies to every function."""

    def apply(self, func_or_sch, target) -> Schedule:
        return cpu_schedule(start(func_or_sch), target)


def cpu_schedule(sch, target) -> Schedule:
    lanes = target.vector_lanes_f32
    for name in _block_names(sch):
        b = sch.get_block(name)
        blk = sch.get(b)
        if is_elementwise(blk) and (not has_select(blk) or _feeds_windows_only(sch, b)):
            _try(sch.compute_inline, b)
    done: set = set()
    for name in _block_names(sch):
        if name in done:
            continue
        b = sch.get_block(name)
        blk = sch.get(b)
        kinds = loop_kinds(sch, b)
        if "R" in kinds and "O" not in kinds and has_reuse(blk) \
                and _spatial_points(blk) > 1:  # not a reduction to one number
            got = tile_with_intrinsic(sch, b, kinds, target)  # int8, bf16: the unit's
            if got is not None:
                sch, handled = got
                done |= handled
                continue
            done |= _tile_reduction(sch, b, kinds, target)
        else:
            _parallel_vectorize(sch, b, kinds, lanes)
    from ..tune.postproc.rewrite_layout import RewriteLayout
    RewriteLayout().apply(sch)  # constant weights in the order the tiles read them
    return sch


def _spatial_points(blk) -> int:
    """How many results the block computes: a whole-tensor min or max (a dynamic
    quantization's range) computes one, and is a vector reduction, not a tile of outputs."""
    points = 1
    for iv in blk.iter_vars:
        points *= iv.extent if iv.kind == "S" else 1
    return points


WINDOW = 64  # reduction points of a window-only reduction (depthwise 3x3 to 7x7, pooling)


def _feeds_windows_only(sch, b) -> bool:
    """Whether every reader of b (padding) reduces over a short window only (a depthwise
    convolution, pooling): inlined there, its condition is one scalar test per vector of
    channels, cheaper than writing and reading the padded copy of a large image. A long
    reduction (a dense convolution) tests once per multiply: the copy stays."""
    readers = sch.get_consumers(b)
    for c in readers:
        points = 1
        for iv in sch.get(c).iter_vars:
            points *= iv.extent if iv.kind == "R" else 1
        if points == 1 or points > WINDOW:
            return False
    return bool(readers)


def _vector_axis(sch, b, spatial: list, lanes: int) -> int:
    """Which spatial loop to vectorize: the one most accesses of the block read or write
    contiguously (their last index steps by 1 with it; a stride counts against it); the
    innermost on a tie."""
    from ..tir.arith import Simplifier
    blk = sch.get(b)
    bind = {}  # loop var -> the block iter var it drives
    for iv, val in zip(blk.iter_vars, sch.realize(b).iter_values):
        for lp in spatial:
            if val is sch.get(lp).loop_var:
                bind[id(lp)] = iv.var
    simp = Simplifier({})
    best, best_score = len(spatial) - 1, None
    for i, lp in enumerate(spatial):
        v = bind.get(id(lp))
        if v is None:
            continue
        score = 0.0
        for r in list(blk.reads) + list(blk.writes):
            if not r.region:
                continue
            aff = simp.affine(r.region[-1][0])
            coef = next((c for atom, c in aff.terms.values() if atom is v), 0)
            score += 1.0 if coef == 1 else -0.5 if coef else 0.0
        if best_score is None or score >= best_score:
            best, best_score = i, score
    return best


def _tile_reduction(sch, b, kinds, target) -> set:
    lanes, cores, registers = target.vector_lanes_f32, target.cores, target.vector_registers
    loops = sch.get_loops(b)
    spatial = [lp for lp, k in zip(loops, kinds) if k == "S"]
    reduce = [lp for lp, k in zip(loops, kinds) if k == "R"]
    v = _vector_axis(sch, b, spatial, lanes)
    # the weight a whole vector axis reads across the reduction (a convolution's C*R*S*K)
    weight_bytes = 4 * _prod(sch, reduce) * _extent(sch, spatial[v])
    spatial = spatial[:v] + spatial[v + 1:] + [spatial[v]]  # the vector axis goes innermost
    outer = list(spatial[:-1])
    inner = spatial[-1]
    vec = inner
    tall = [i for i, lp in enumerate(spatial[:-1]) if _extent(sch, lp) >= 4]
    # 8 independent accumulators (enough to hide the FMA latency): 4 rows of 2 vectors, or
    # in a single row 4 vectors side by side
    width = (2 if tall else 4) * lanes
    if _extent(sch, inner) > width:
        o, vec = sch.split(inner, [None, width])
        outer.append(o)
    rows = None
    if tall:
        i = tall[-1]
        ro, rows = sch.split(spatial[i], [None, _rows(_extent(sch, spatial[i]), registers)])
        outer[i] = ro
    if len(outer) > len(spatial) - 1 and weight_bytes > target.l2_bytes // 2:
        # blocks of the vector axis outermost: one block's panel of the weight (the reduction
        # times the vector width) stays in cache while every other tile uses it. A weight
        # that fits in half the L2 stays there anyway: its blocks go innermost, so each
        # input tile is read once and the output written row by row (a 1x1 convolution of
        # a large image: 3x faster)
        outer = [outer[-1]] + outer[:-1]
    sch.reorder(*outer, *reduce, *([rows] if rows is not None else []), vec)
    handled = set()
    if outer:
        acc = sch.cache_write(b, 0, "local")
        sch.reverse_compute_at(acc, outer[-1])
        for c in sch.get_consumers(acc):
            blk = sch.get(c)
            if is_elementwise(blk) and _ok(sch.reverse_compute_at, c, outer[-1]):
                handled.add(blk.name)
                if not _ok(sch.reverse_compute_inline, c):
                    _vectorize_innermost(sch, c, lanes)  # an epilogue's exp, vectorized
        acc_loops = sch.get_loops(acc)
        if acc_loops:
            _ok(sch.vectorize, acc_loops[-1])
    _ok(sch.vectorize, vec)
    if rows is not None:
        _ok(sch.unroll, rows)
    for r in reduce[1:]:
        if _extent(sch, r) <= 8:
            _ok(sch.unroll, r)
    if outer:
        par = outer[0]
        if len(outer) > 1 and _extent(sch, par) < 4 * cores:
            par = _try(sch.fuse, outer[0], outer[1]) or outer[0]
        if _worth_parallel(sch, b):
            _ok(sch.parallel, par)
    return handled


def _rows(extent: int, registers: int) -> int:
    """Rows of the register tile (of two vectors each): 4 with 16 vector registers; with 32
    (AVX-512), up to 8, a divisor of the loop's extent where one fits (7 for 7x7, 14x14,
    28x28 and 56x56 images), so that no row is a tail."""
    if registers < 32:
        return 4
    return next((r for r in (8, 7, 6) if extent % r == 0), 4)


def _vectorize_innermost(sch, b, lanes: int) -> None:
    """The block's innermost loop vectorized, split by `lanes` when longer."""
    loops = sch.get_loops(b)
    if not loops or _extent(sch, loops[-1]) < lanes:
        return
    inner = loops[-1]
    if _extent(sch, inner) > lanes:
        inner = sch.split(inner, [None, lanes])[1]
    _ok(sch.vectorize, inner)


def _vectorize_reduction(sch, b, kinds, lanes: int) -> bool:
    """A reduction along its innermost loop (softmax's sums, layer_norm's statistics):
    rfactor that loop's last `lanes` iterations into partial results kept side by side, which
    vectorize (exp and all), then reduce those. False where it does not apply."""
    loops = sch.get_loops(b)
    if not loops or kinds[-1] != "R" or "O" in kinds or _extent(sch, loops[-1]) < 2 * lanes:
        return False
    spatial = sum(1 for iv in sch.get(b).iter_vars if iv.kind == "S")
    _, inner = sch.split(loops[-1], [None, lanes])
    try:
        rf = sch.rfactor(inner, spatial)  # the partial results' axis innermost: contiguous
    except ScheduleError:
        return False
    rf_loops = sch.get_loops(rf)
    _ok(sch.vectorize, rf_loops[-1])
    _parallel_outer(sch, rf)
    _parallel_outer(sch, b)
    return True


PARALLEL_MIN_POINTS = 1 << 15  # a smaller block runs serially: waking threads costs more


def _worth_parallel(sch, b) -> bool:
    """Whether the block does enough work (iteration points, reductions included) to share
    among threads: a squeeze-excite's 1x1 convolutions and global means do not."""
    points = 1
    for iv in sch.get(b).iter_vars:
        points *= iv.extent
    return points >= PARALLEL_MIN_POINTS


PARALLEL_CHUNKS = 32  # iterations a parallel loop needs to share out (batch 1: N is not enough)


def _prod(sch, loops) -> int:
    out = 1
    for lp in loops:
        out *= _extent(sch, lp)
    return out


def _parallel_outer(sch, b) -> None:
    """The leading spatial loops of the block, fused, in parallel."""
    lead = []
    for lp, k in zip(sch.get_loops(b), loop_kinds(sch, b)):
        if k != "S" or sch.get(lp).kind != "serial":
            break  # a vectorized loop stays out: fused, the parallel loop would be the batch
        if lead and _prod(sch, lead) >= PARALLEL_CHUNKS:
            break  # enough chunks for every core; the rest is each chunk's loop
        lead.append(lp)
    if lead and _worth_parallel(sch, b):
        par = _try(sch.fuse, *lead) if len(lead) > 1 else lead[0]
        _ok(sch.parallel, par or lead[0])


def _parallel_vectorize(sch, b, kinds, lanes: int) -> None:
    loops = sch.get_loops(b)
    if not loops:
        return
    if _vectorize_reduction(sch, b, kinds, lanes):
        return
    last_s = max((i for i, k in enumerate(kinds) if k == "S"), default=None)
    if kinds[-1] == "R" and "O" not in kinds and last_s is not None \
            and _extent(sch, loops[last_s]) >= lanes:
        # a short window (pooling): its loops outside the last spatial loop, which vectorizes
        after = loops[last_s + 1:]
        if _ok(sch.reorder, *after, loops[last_s]):
            loops = sch.get_loops(b)
            kinds = loop_kinds(sch, b)
    if kinds[-1] == "S" and _extent(sch, loops[-1]) >= lanes:
        _, i = sch.split(loops[-1], [None, lanes])
        _ok(sch.vectorize, i)
    _parallel_outer(sch, b)
