"""Cross-thread reduction: a reduction block whose reduction loops include a threadIdx loop
is rewritten, before blocks are lowered, into per-thread partials combined by warp shuffles
(warp.py) where the threads allow it, and otherwise through shared memory:

    for tx in threadIdx.x(T): for ko: Y[i] += X[i, ko * T + tx]        (block, with init)
 -> red[0] = 0                                                          (local, per thread)
    for tx in threadIdx.x(T): for ko: red[0] += X[i, ko * T + tx]
    (warp shuffles, see warp.py: the result is red[0] of thread tx' == 0; or a tree:)
    for tx': red_sh[row * T + tx'] = red[0];  sync
    for s in T/2, T/4, ..., 1:                                          (a tree, unrolled)
        for tx': if tx' < s: red_sh[row * T + tx'] op= red_sh[row * T + tx' + s];  sync
    for tx': if tx' == 0: Y[i] = init op red_sh[row * T]         (op red[0], shuffled)

`row` numbers the threadIdx loops around the reduction (several rows per thread block).
Loops with the same thread tag share the hardware index, so the fresh `tx'` loops are the
same threads as `tx`."""
from __future__ import annotations

from ...error import BuildError
from ...schedule.error import ScheduleError
from ...schedule.primitives.blocks import COMBINERS, reduction_parts
from ...te.intrin import _IDENTITY
from ...tir.buffer import Buffer
from ...tir.expr import BufferLoad, IntImm, Var, binary, const
from ...tir.func import PrimFunc
from ...tir.functor import find_stmts, map_children, substitute, uses_var
from ...tir.stmt import (Block, BlockRealize, BufferStore, For, IfThenElse, barrier, seq)
from .warp import can_shuffle, warp_combine


def _conjuncts(e):
    if getattr(e, "op", None) == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def _all(conds):
    out = None
    for c in conds:
        if isinstance(c, IntImm) and c.value:
            continue
        out = c if out is None else binary("and", out, c)
    return out


def _is_threadidx(lp: For) -> bool:
    return lp.kind == "thread_binding" and lp.thread.startswith("threadIdx")


def lower_cross_thread_reductions(func: PrimFunc) -> PrimFunc:
    """Rewrite every reduction whose reduction variables are driven by a threadIdx loop."""
    root = func.root
    new_bufs: list = []

    def walk(s, path):
        if isinstance(s, For):
            path = path + [s]
            sites = [br for br in find_stmts(s, BlockRealize, stop=BlockRealize)]
            if len(sites) == 1 and _starts_here(sites[0], path):
                return _rewrite(s, sites[0], path, new_bufs, _launch(path[0]))
            return map_children(s, lambda x: walk(x, path))
        if isinstance(s, IfThenElse):  # a condition around: no shuffles (it may split a warp)
            path = path + [s]
        if isinstance(s, BlockRealize):
            rvars = _red_loop_vars(s, path)
            bound = [lp.loop_var.name for lp in path
                     if isinstance(lp, For) and _is_threadidx(lp) and lp.loop_var in rvars]
            if bound:
                raise BuildError(f"block {s.block.name}: its reduction is bound to threads "
                                 f"(loop {', '.join(bound)}) but its outermost reduction loop "
                                 "also holds other blocks; keep the reduction's loops to itself "
                                 "(compute_at others elsewhere) so it can be reduced across threads")
            return s
        return map_children(s, lambda x: walk(x, path))

    body = walk(root.body, [])
    if not new_bufs:
        return func
    new_root = Block(root.name, root.iter_vars, root.reads, root.writes, body, root.init,
                     tuple(root.alloc_buffers) + tuple(new_bufs), root.annotations)
    return func.with_body(BlockRealize((), const(True), new_root))


def _launch(top) -> dict:
    """The launch extent of each threadIdx tag in the kernel of `top` (a top-level statement):
    its largest loop bound to that tag, as GPU lowering will launch it."""
    out: dict = {}
    for lp in find_stmts(top, For):
        if _is_threadidx(lp):
            out[lp.thread] = max(out.get(lp.thread, 1), lp.extent)
    return out


def _red_loop_vars(br: BlockRealize, path) -> set:
    red = [v for iv, v in zip(br.block.iter_vars, br.iter_values) if iv.kind == "R"]
    return {lp.loop_var for lp in path
            if isinstance(lp, For) and any(uses_var(v, {lp.loop_var}) for v in red)}


def _starts_here(br: BlockRealize, path) -> bool:
    """Is path[-1] the outermost reduction loop of `br`, with a threadIdx loop among them?"""
    rvars = _red_loop_vars(br, path)
    if not rvars or path[-1].loop_var not in rvars:
        return False
    loops = [lp for lp in path if isinstance(lp, For)]
    if any(lp.loop_var in rvars for lp in loops[:-1]):
        return False
    return any(_is_threadidx(lp) and lp.loop_var in rvars for lp in loops)


def _rewrite(top: For, br: BlockRealize, path, new_bufs, launch: dict):
    """The statements replacing loop `top` (= path[-1]), the outermost reduction loop;
    `path` holds the loops (and conditions) around it, `launch` the kernel's thread extents."""
    b = br.block
    guarded = any(isinstance(x, IfThenElse) for x in path)
    outer = [lp for lp in path[:-1] if isinstance(lp, For)]
    name = b.name
    try:
        op, store, src = reduction_parts(b, "cross-thread reduction")
    except ScheduleError as e:
        raise BuildError(f"{e}; only such reductions can be bound to threadIdx") from None
    inside = [lp for lp in find_stmts(top, For)]
    red_vars = _red_loop_vars(br, outer + inside)
    spatial_vals = [v for iv, v in zip(b.iter_vars, br.iter_values) if iv.kind != "R"]
    for lp in inside:
        if any(uses_var(v, {lp.loop_var}) for v in spatial_vals):
            raise BuildError(f"block {name}: loop {lp.loop_var.name} drives a spatial variable "
                             "inside the cross-thread reduction's loops; move the reduction "
                             "loops (the one bound to threadIdx among them) innermost")
    red_threads = [lp for lp in inside if _is_threadidx(lp)]
    row_threads = [lp for lp in outer if _is_threadidx(lp)]
    tags = [lp.thread for lp in red_threads + row_threads]
    if len(set(tags)) != len(tags):
        raise BuildError(f"block {name}: the threadIdx loops around the cross-thread "
                         f"reduction repeat a tag ({', '.join(tags)}); use one tag per level")

    dtype = store.buffer.dtype
    vmap = {iv.var: v for iv, v in zip(b.iter_vars, br.iter_values)}
    value = substitute(src, vmap)
    out_idx = tuple(substitute(i, vmap) for i in store.indices)
    init_value = substitute(b.init.value, vmap) if isinstance(b.init, BufferStore) else None
    if init_value is None:
        raise BuildError(f"block {name}: its init is not a single store; cannot reduce across "
                         "threads")
    part_guard = [c for c in _conjuncts(br.predicate) if uses_var(c, red_vars)]
    out_guard = [c for c in _conjuncts(br.predicate) if not uses_var(c, red_vars)]

    T = 1
    for lp in red_threads:
        T *= lp.extent
    rows = 1
    for lp in row_threads:
        rows *= lp.extent
    local = Buffer(f"{store.buffer.name}_red", (1,), dtype, "local")
    new_bufs.append(local)
    identity = _IDENTITY[COMBINERS[op]](dtype)
    zero = const(0)
    acc = BufferStore(local, binary(op, BufferLoad(local, (zero,), dtype), value), (zero,))
    guard = _all(part_guard)
    partial = _replace(top, br, acc if guard is None else IfThenElse(guard, acc))

    fresh = {lp: Var(lp.loop_var.name + "_r", lp.loop_var.dtype) for lp in red_threads}
    rt = _flat([fresh[lp] for lp in red_threads], [lp.extent for lp in red_threads])
    row = _flat([lp.loop_var for lp in row_threads], [lp.extent for lp in row_threads])

    def in_threads(stmt):
        for lp in reversed(red_threads):
            stmt = For(fresh[lp], lp.extent, "thread_binding", stmt, lp.thread)
        return stmt

    if not guarded and can_shuffle(red_threads, row_threads, launch, dtype):
        combined, bufs = warp_combine(local, op, identity, T, rows, rt, row, in_threads)
        result = BufferLoad(local, (zero,), dtype)
    else:
        combined, bufs, result = _tree(local, op, T, rows, rt, row, in_threads)
    new_bufs += bufs
    final = BufferStore(store.buffer, binary(op, init_value, result), out_idx)
    cond = _all([binary("==", rt, zero)] + out_guard)
    return seq(BufferStore(local, identity, (zero,)), partial, *combined,
               in_threads(IfThenElse(cond, final)))


def _tree(local: Buffer, op: str, T: int, rows: int, rt, row, in_threads):
    """(statements, shared buffers, result): every thread's local[0] combined through a
    shared buffer, in a tree of log2(T) steps with a barrier after each."""
    dtype = local.dtype
    shared = Buffer(f"{local.name}_shared", (rows * T,), dtype, "shared")

    def slot(r):
        return r if rows == 1 else binary("+", binary("*", row, const(T)), r)

    def sh(r):
        return BufferLoad(shared, (slot(r),), dtype)

    stmts = [in_threads(BufferStore(shared, BufferLoad(local, (const(0),), dtype), (slot(rt),))),
             barrier()]
    s = 1
    while s < T:
        s *= 2
    s //= 2
    while s >= 1:
        cond = binary("<", rt, const(s))
        if 2 * s > T:  # the top half is short: only lanes whose partner exists
            cond = binary("and", cond, binary("<", binary("+", rt, const(s)), const(T)))
        step = BufferStore(shared, binary(op, sh(rt), sh(binary("+", rt, const(s)))), (slot(rt),))
        stmts += [in_threads(IfThenElse(cond, step)), barrier()]
        s //= 2
    return stmts, [shared], sh(const(0))


def _flat(vars_, extents):
    out = None
    for v, n in zip(vars_, extents):
        out = v if out is None else binary("+", binary("*", out, const(n)), v)
    return out if out is not None else const(0)


def _replace(stmt, old, new):
    if stmt is old:
        return new
    return map_children(stmt, lambda x: _replace(x, old, new))
