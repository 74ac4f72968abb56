"""The CPU default schedule of a reduction a tensor intrinsic computes (an int8 or bf16
matmul): zero search, a fixed tiling around the target's best unit.

- AMX (a 32 x 32 accumulator tile per call, its reduction steps inside the unit): the rows
  and columns of the output in tiles of 32, the reduction in blocks of up to 16 steps of 64
  (1024 int8) per call (4 steps ran 1.4-1.6x slower on a 1024 GEMM and BERT's projections:
  each call loads and stores the accumulator tiles), rows outermost (a row block of the activations stays in cache while
  the weight streams past it), the accumulator tile written back per column tile.
- The vector dot products (VNNI, AVX2): a register tile of up to 28 accumulators, rows by
  up to 4 vectors of output columns, both dividing the output (no guard inside the unit's
  nest: 7 x 4 on a 14-wide image, 4 x 4 on a matmul), the reduction in blocks of 64 groups,
  column blocks outermost (one block's weight panel stays in cache), the accumulators
  written back per row tile. A convolution (channels-last, an (R, S, K, C) weight) is tiled
  so too, its output pixels the rows, its input channels the reduction the unit groups.

Either way the weight is packed by the unit's group, then by the column tile
(RewriteLayout, as cpu.py does for every block), the elementwise epilogue is applied as the
accumulators are written back, and the outer loops run in parallel. A block no unit takes
(its extents do not divide, its types are another's) keeps cpu.py's plain tiling.
"""
from __future__ import annotations

from ..schedule import ScheduleError
from ..tir.functor import substitute
from ..tir.intrin.base import computes_like
from ..tir.intrin.x86 import AMX_BF16, AMX_INT8, BF16_DOTS, INT8_DOTS
from ..tir.stmt import BufferStore
from ..tune.schedule_rule.analysis import is_elementwise
from ..tune.schedule_rule.multi_level_tiling_intrin import _roles

AMX_STEPS = 16  # reduction steps of 64 bytes per AMX call (the accumulator loaded once)
VECTOR_COLUMNS, VECTOR_REGISTERS, VECTOR_STEPS = 4, 28, 64


def tile_with_intrinsic(sch, b, kinds, target):
    """(a copy of `sch` with block `b` tiled around the target's best unit that computes it,
    the names of the blocks it scheduled), or None: sch untouched, its trace too."""
    blk, br = sch.get(b), sch.realize(b)
    name = blk.name
    if not isinstance(blk.body, BufferStore) or "O" in kinds or "R" not in kinds:
        return None
    store = substitute(blk.body, {iv.var: v for iv, v in zip(blk.iter_vars, br.iter_values)})
    units = [i for i in (AMX_INT8, AMX_BF16) + INT8_DOTS[1:] + BF16_DOTS[1:]
             if i.offered_by(target) and computes_like(store, i)]
    for intrin in units:
        try:
            return _tiled(sch.copy(), name, kinds, intrin, target)
        except (ScheduleError, _Skip):
            continue
    return None


class _Skip(Exception):
    """The unit does not fit the block's extents."""


def _tiled(sch, name, kinds, intrin, target):
    b = sch.get_block(name)
    blk, br = sch.get(b), sch.realize(b)
    loops = sch.get_loops(b)
    ext = [sch.get(lp).extent for lp in loops]
    spatial, reduction = _roles(intrin)
    position = {iv.var: p for iv, v in zip(blk.iter_vars, br.iter_values)
                for p, lp in enumerate(loops) if v is sch.get(lp).loop_var}
    index = blk.body.indices
    s_pos = [position.get(index[k]) for k in range(len(index) - len(spatial), len(index))]
    if None in s_pos or any(kinds[p] != "S" or ext[p] % f for p, (_, f) in zip(s_pos, spatial)):
        raise _Skip
    fixed = [f for _, f in reduction if f]
    group_bytes = 1
    for f in fixed:
        group_bytes *= f
    r_pos = next((p for p in reversed(range(len(loops)))
                  if kinds[p] == "R" and ext[p] % group_bytes == 0), None)
    if r_pos is None:
        raise _Skip
    params = sch.func.params
    free = sch.func.attr("layout_free_params")
    weight = next((i for i, r in enumerate(blk.reads) if r.buffer in params
                   and (free is None or params.index(r.buffer) in free)
                   and not _reads_row(blk, r.buffer, index)), None)
    if weight is not None:
        axis = _axis_of(blk, blk.reads[weight].buffer,
                        next(v for v, p in position.items() if p == r_pos))
        if axis is None:
            raise _Skip
        sch.pack_layout(b, weight, reduction[-1][1], axis)
    loops = sch.get_loops(b)
    amx = len(spatial) == 2
    pieces = {}
    outer_s = []
    for (k, f), p in zip(spatial, s_pos):
        if amx:
            o, pieces[k] = sch.split(loops[p], [None, f])
            outer_s.append(o)
        else:  # a register tile of rows x vectors of columns
            rows_ext = next((ext[q] for q in reversed(range(len(loops)))
                             if kinds[q] == "S" and q not in s_pos), 1)
            n_rows, cols = _register_tile(rows_ext, ext[p] // f)
            o, c, pieces[k] = sch.split(loops[p], [None, cols, f])
            outer_s.append((o, c))
    rest, inner = sch.split(loops[r_pos], [None, group_bytes])
    inner = sch.split(inner, fixed) if len(fixed) > 1 else [inner]
    steps = ext[r_pos] // group_bytes
    if amx:
        block = max(d for d in range(1, AMX_STEPS + 1) if steps % d == 0)
        rest, pieces[reduction[0][0]] = sch.split(rest, [None, block])
    else:
        block = max(d for d in range(1, VECTOR_STEPS + 1) if steps % d == 0)
        rest, k_in = sch.split(rest, [None, block])
    for (k, _), piece in zip([r for r in reduction if r[1]], inner):
        pieces[k] = piece
    tail = [pieces[k] for k in range(len(intrin.extents))]
    others = [lp for p, lp in enumerate(loops) if p not in s_pos and p != r_pos]
    other_s = [lp for lp in others if kinds[loops.index(lp)] == "S"]
    other_r = [lp for lp in others if kinds[loops.index(lp)] == "R"]
    if amx:
        rows_o, cols_o = outer_s
        sch.reorder(*other_s, rows_o, cols_o, rest, *other_r, *tail)
        write_at, par = cols_o, [*other_s, rows_o]
    else:
        (cols_o, cols_r), = outer_s
        rows = other_s[-1] if other_s else None
        if rows is not None and sch.get(rows).extent > n_rows:
            rows_o, rows_r = sch.split(rows, [None, n_rows])
            lead = other_s[:-1]
        else:
            rows_o, rows_r, lead = None, rows, other_s[:-1]
        head = [cols_o, *lead] + ([rows_o] if rows_o is not None else [])
        sch.reorder(*head, rest, *other_r, k_in, *([rows_r] if rows_r else []), cols_r, *tail)
        if rows_r is not None:
            sch.unroll(rows_r)
        sch.unroll(cols_r)
        write_at, par = head[-1], head[:max(2, len(head) - 1)]  # (a conv's rows: y too)
    sch.tensorize(tail[0], intrin.name)
    acc = sch.cache_write(b, 0, "local")
    sch.reverse_compute_at(acc, write_at)
    handled = {name}
    written = [sch.get(acc).name]  # the blocks that write the tile back, epilogue and all
    for c in sch.get_consumers(acc):
        cb = sch.get(c)
        if is_elementwise(cb):
            try:
                sch.reverse_compute_at(c, write_at)
                handled.add(cb.name)
                written.append(cb.name)
                sch.reverse_compute_inline(c)
                written.pop()
            except ScheduleError:
                pass
    for w in written:  # the write-back vectorized: an epilogue's exp or tanh as vector math
        try:
            sch.vectorize(sch.get_loops(sch.get_block(w))[-1])
        except ScheduleError:
            pass
    par = [lp for lp in par if sch.get(lp).kind == "serial"]
    if par:
        fused = sch.fuse(*par) if len(par) > 1 else par[0]
        try:
            sch.parallel(fused)
        except ScheduleError:
            pass
    return sch, handled


def _register_tile(rows: int, col_vectors: int) -> tuple:
    """(rows, vectors of columns) of the vector units' accumulator tile: dividing the
    extents (no guard inside the unit's nest), at most VECTOR_COLUMNS vectors wide and
    VECTOR_REGISTERS accumulators, the most accumulators (wider first): 4 x 4 for a
    matmul, 7 x 4 for a 14- or 7-wide image."""
    best = (1, 1)
    for c in range(1, VECTOR_COLUMNS + 1):
        for r in range(1, VECTOR_REGISTERS // c + 1):
            if col_vectors % c == 0 and rows % r == 0 and (r * c, c) > (best[0] * best[1],
                                                                         best[1]):
                best = (r, c)
    return best


def _axis_of(blk, buf, var):
    """The axis of `buf` that the block indexes by iteration variable `var` alone (a matmul
    weight's K, a convolution weight's input channels), or None."""
    from ..tir.expr import BufferLoad
    from ..tir.functor import visit
    found = []
    visit(blk.body, lambda n: found.append(n) if isinstance(n, BufferLoad) and n.buffer is buf
          else None)
    axes = {a for ld in found for a, i in enumerate(ld.indices) if i is var}
    return axes.pop() if len(axes) == 1 else None


def _reads_row(blk, buf, out_index) -> bool:
    """Whether the block reads `buf` along the output's rows (the activation, not the
    weight): its loads use the output's second-to-last index variable."""
    from ..tir.expr import BufferLoad
    from ..tir.functor import uses_var, visit
    if len(out_index) < 2:
        return False
    found = []
    visit(blk.body, lambda n: found.append(n) if isinstance(n, BufferLoad) and n.buffer is buf
          else None)
    return any(uses_var(i, {out_index[-2]}) for ld in found for i in ld.indices)
