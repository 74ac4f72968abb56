"""Reduction transformations: decompose_reduction and rfactor.

decompose_reduction(B, L): B's init becomes a block of its own before loop L, inside copies
of the spatial loops from L down to B.

rfactor(L, axis): for a reduction B over loop L,
    Y[s] += f(s, r)    ->    Y_rf[s, l] += f(s, r)   (B_rf, l spatial: one partial per l)
                             Y[s]       += Y_rf[s, l] (B, a reduction over l)
"""
from __future__ import annotations

from ...tir.buffer import Buffer
from ...tir.arith import Simplifier, eval_bound
from ...tir.expr import Binary, BufferLoad, IntImm, Var, binary, const
from ...tir.functor import collect_realizes, substitute, uses_var
from ...tir.stmt import TRUE, Block, BlockRealize, BufferStore, For, IterVar, seq
from ..error import ScheduleError
from ..trace import BlockRV, instruction
from .blocks import blocks_in, reads_of, reduction_parts, refreshed, scope_stmts
from .cache import _insert_at_scope, _unique_block_name
from .common import loop_dom
from .inline import add_alloc


def _conjuncts(e):
    if getattr(e, "op", None) == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def _reduction_loops(br: BlockRealize, loops) -> set:
    red = [v for iv, v in zip(br.block.iter_vars, br.iter_values) if iv.kind == "R"]
    return {lp.loop_var for lp in loops if any(uses_var(v, {lp.loop_var}) for v in red)}


@instruction("DecomposeReduction", "decompose_reduction", inputs=("block", "loop"))
def decompose_reduction(sch, inputs, attrs, decision):
    what = "decompose_reduction"
    entry = sch._block(inputs[0])
    br, b = entry.node, entry.node.block
    lentry = sch._loop(inputs[1])
    loop = lentry.node
    lname = loop.loop_var.name
    if b.init is None:
        raise ScheduleError(f"{what}: block {b.name} has no init to decompose")
    loops = [p for p in entry.parents if isinstance(p, For)]
    if not any(lp is loop for lp in loops):
        raise ScheduleError(f"{what}: loop {lname} is not around block {b.name}")
    pos = next(i for i, lp in enumerate(loops) if lp is loop)
    rvars = _reduction_loops(br, loops)
    above = [lp.loop_var.name for lp in loops[:pos] if lp.loop_var in rvars]
    if above:
        raise ScheduleError(f"{what}: loop {lname} is inside reduction loop(s) "
                            f"{', '.join(above)} of block {b.name}; the init must go outside "
                            "every reduction loop")
    spatial = [(iv, v) for iv, v in zip(b.iter_vars, br.iter_values) if iv.kind != "R"]
    for iv, v in spatial:
        if uses_var(v, rvars):
            raise ScheduleError(f"{what}: a loop drives both spatial variable {iv.var.name} and a "
                                f"reduction variable of block {b.name}; split them apart first")
    repeat = _recomputing(loops[pos:], rvars, [v for _, v in spatial], loop_dom(loops))
    if repeat:  # each recomputation of the block needs the init again
        raise ScheduleError(f"{what}: block {b.name} is recomputed across the iterations of "
                            f"loop(s) {', '.join(repeat)} (compute_at put it there); decompose "
                            "at a loop inside them")
    below = [lp for lp in loops[pos:] if lp.loop_var not in rvars]
    fresh = {lp.loop_var: Var(lp.loop_var.name + "_init", lp.loop_var.dtype) for lp in below}
    new_ivs = [IterVar(Var(iv.var.name + "_init", iv.var.dtype), iv.extent, "S") for iv, _ in spatial]
    vmap = {iv.var: niv.var for (iv, _), niv in zip(spatial, new_ivs)}
    pred = TRUE
    others = {lp.loop_var for lp in loops} - rvars
    for c in _conjuncts(br.predicate):
        if not uses_var(c, rvars):
            pred = binary("and", pred, substitute(c, fresh))
        elif uses_var(c, others):  # the init would need the guard without its reduction part
            raise ScheduleError(f"{what}: block {b.name}'s guard {c!r} ties its reduction loops "
                                "to the others (a split of a fused loop); the init cannot be "
                                "placed apart; split and fuse so that each loop is one kind")
    name = _unique_block_name(sch, f"{b.name}_init")
    init_block = refreshed(Block(name, tuple(new_ivs), (), (), substitute(b.init, vmap)))
    stmt = BlockRealize(tuple(substitute(v, fresh) for _, v in spatial), pred, init_block)
    for lp in reversed(below):
        stmt = For(fresh[lp.loop_var], lp.extent, lp.kind, stmt, lp.thread)
    sch.state.replace({br: BlockRealize(br.iter_values, br.predicate, refreshed(b, init=None))})
    loop = sch.state.loop(loop.loop_var).node
    sch.state.replace({loop: seq(stmt, loop)})
    return [sch._new(BlockRV, name)]


def _recomputing(loops, rvars, spatial_values, dom) -> list:
    """Names of the spatial `loops` along which the block computes some element more than
    once: loops its variables do not depend on, or on which they depend in a way that is
    not provably one-to-one (overlapping windows y*2 + ax, ax < 3; a // or %)."""
    free = {lp.loop_var: lp.extent for lp in loops if lp.loop_var not in rvars and lp.extent > 1}
    out = {v for v in free if not any(uses_var(e, {v}) for e in spatial_values)}
    simp = Simplifier(dom)
    for e in spatial_values:
        terms = []
        for atom, coef in simp.affine(e).terms.values():
            if atom in free:
                terms.append((abs(coef), free[atom], atom))
            elif not isinstance(atom, Var):
                out.update(v for v in free if uses_var(atom, {v}))
        reach = 0
        for coef, n, v in sorted(terms, key=lambda t: t[:2]):
            if coef <= reach:  # overlaps the terms of smaller coefficients
                out.add(v)
            reach += coef * (n - 1)
    return sorted(v.name for v in out)


def _check_every_partial_computed(what, br, loops, loop):
    """Each iteration of `loop` must compute its partial result (the last one too, under
    the guard of a split that does not divide the extent): the final reduction reads them
    all, and one never computed is never initialized either. Guards must be affine with
    positive coefficients (then the last iteration is the one to check, and all of them
    hold together with the other loops at 0); a // or % (a split of a fused loop) is not."""
    last = {loop.loop_var: const(loop.extent - 1, loop.loop_var.dtype)}
    others = loop_dom([lp for lp in loops if lp is not loop])
    simp = Simplifier(loop_dom(loops))
    for c in _conjuncts(br.predicate):
        if not uses_var(c, {loop.loop_var}):
            continue
        ok = False
        if isinstance(c, Binary) and c.op in ("<", "<="):
            diff = binary("-", c.a, c.b)
            terms = simp.affine(diff).terms.values()
            low = eval_bound(substitute(diff, last), others, others)
            ok = (all(isinstance(a, Var) and k > 0 for a, k in terms) and low is not None
                  and isinstance(low[0], IntImm)
                  and (low[0].value < 0 if c.op == "<" else low[0].value <= 0))
        if not ok:
            raise ScheduleError(f"{what}: under the guard {c!r} (a split that does not divide "
                                f"the extent), the last iteration of loop {loop.loop_var.name} "
                                "computes nothing, and the final reduction would read its "
                                "partial result uninitialized; rfactor another loop")


@instruction("RFactor", "rfactor", inputs=("loop",), attrs=("factor_axis",))
def rfactor(sch, inputs, attrs, decision):
    what = "rfactor"
    lentry = sch._loop(inputs[0])
    loop = lentry.node
    lname = loop.loop_var.name
    owners = []
    for br in collect_realizes(loop.body):
        red = [v for iv, v in zip(br.block.iter_vars, br.iter_values) if iv.kind == "R"]
        if any(uses_var(v, {loop.loop_var}) for v in red):
            owners.append(br)
    if not owners:
        raise ScheduleError(f"{what}: loop {lname} does not drive a reduction variable of any "
                            "block; rfactor needs a reduction loop")
    if len(owners) > 1:
        raise ScheduleError(f"{what}: loop {lname} drives reductions of several blocks")
    br = owners[0]
    b = br.block
    op, store, src = reduction_parts(b, what)
    entry = sch.state.block(b.name)
    loops = [p for p in entry.parents if isinstance(p, For)]
    rloops = [lp for lp in loops if lp.loop_var in _reduction_loops(br, loops)]
    for iv, v in zip(b.iter_vars, br.iter_values):
        if iv.kind != "R" and uses_var(v, {lp.loop_var for lp in rloops}):
            raise ScheduleError(f"{what}: a loop drives both spatial variable {iv.var.name} and a "
                                f"reduction variable of block {b.name}")
    _check_every_partial_computed(what, br, loops, loop)
    y = store.buffer
    scope_block, stmts, pos = scope_stmts(sch, sch.state.block(b.name))
    for other in blocks_in(stmts[pos]):
        if other is not b and y in reads_of(other):
            raise ScheduleError(f"{what}: block {other.name} reads {y.name} inside the same loop "
                                f"nest as block {b.name}, before the final reduction would run; "
                                "rfactor before moving the consumer there")
    axis = attrs[0]
    if not -(y.ndim + 1) <= axis <= y.ndim:
        raise ScheduleError(f"{what}: factor_axis {axis} is out of range for {y.name} with "
                            f"{y.ndim} dimensions (use 0..{y.ndim})")
    axis %= y.ndim + 1
    shape = list(y.shape)
    shape.insert(axis, loop.extent)
    y_rf = Buffer(f"{y.name}_rf", tuple(shape), y.dtype, "global")
    # the partial-result block: spatial over s and l, reduction over the other loops
    spatial = [(iv, v) for iv, v in zip(b.iter_vars, br.iter_values) if iv.kind != "R"]
    s_ivs = [IterVar(Var(iv.var.name, iv.var.dtype), iv.extent, "S") for iv, _ in spatial]
    v_rf = IterVar(Var("v" + lname, loop.loop_var.dtype), loop.extent, "S")
    r_ivs = {lp.loop_var: IterVar(Var("v" + lp.loop_var.name, lp.loop_var.dtype), lp.extent, "R")
             for lp in rloops if lp is not loop}
    loop_to_iv = {lp: iv.var for lp, iv in r_ivs.items()}
    loop_to_iv[loop.loop_var] = v_rf.var
    vmap = {iv.var: niv.var for (iv, _), niv in zip(spatial, s_ivs)}
    for iv, v in zip(b.iter_vars, br.iter_values):
        if iv.kind == "R":
            vmap[iv.var] = substitute(v, loop_to_iv)
    idx = [substitute(i, vmap) for i in store.indices]
    idx.insert(axis, v_rf.var)
    idx = tuple(idx)
    rf_store = BufferStore(y_rf, binary(op, BufferLoad(y_rf, idx, y.dtype), substitute(src, vmap)), idx)
    ident = b.init.value if isinstance(b.init, BufferStore) else const(0, y.dtype)
    rf_block = refreshed(Block(_unique_block_name(sch, f"{b.name}_rf"),
                               tuple(s_ivs) + (v_rf,) + tuple(r_ivs.values()), (), (), rf_store,
                               BufferStore(y_rf, ident, idx)))
    rf_values = tuple(v for _, v in spatial) + (loop.loop_var,) + tuple(r_ivs)
    rf_real = BlockRealize(rf_values, br.predicate, rf_block)
    # the final reduction over the partial results, in a loop nest of its own
    f_s = [IterVar(Var(iv.var.name, iv.var.dtype), iv.extent, "S") for iv, _ in spatial]
    f_r = IterVar(Var("v" + lname, loop.loop_var.dtype), loop.extent, "R")
    fmap = {iv.var: niv.var for (iv, _), niv in zip(spatial, f_s)}
    out_idx = tuple(substitute(i, fmap) for i in store.indices)
    rf_idx = list(out_idx)
    rf_idx.insert(axis, f_r.var)
    final_store = BufferStore(y, binary(op, BufferLoad(y, out_idx, y.dtype),
                                        BufferLoad(y_rf, tuple(rf_idx), y.dtype)), out_idx)
    final = refreshed(Block(b.name, tuple(f_s) + (f_r,), (), (), final_store,
                            substitute(b.init, fmap), (), b.annotations))
    loop_vars = [Var(f"ax{d}") for d in range(len(f_s) + 1)]
    nest = BlockRealize(tuple(loop_vars), TRUE, final)
    for v, iv in reversed(list(zip(loop_vars, list(f_s) + [f_r]))):
        nest = For(v, iv.extent, "serial", nest)
    sch.state.replace({br: rf_real})
    _insert_at_scope(sch, scope_block.name, pos + 1, nest)
    add_alloc(sch, scope_block.name, y_rf)
    return [sch._new(BlockRV, rf_block.name)]

