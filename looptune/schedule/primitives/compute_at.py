"""Moving blocks into other blocks' loops.

compute_at(P, L): producer P moves to the start of loop L's body (L a loop of P's consumers)
and computes, per iteration of L, exactly the region of its output that the consumers under
L read there - found by relaxing the loops below L in the consumers' read regions:

    for i0: for i1 in 0..8: C[i0*8+i1] = f(X[i0*8+i1-1], X[i0*8+i1+1])
    compute_at(P, i0) ->  for i0: { for ax0 in 0..10: X[i0*8-1+ax0] = ...   (clamped, guarded)
                                     for i1 in 0..8: C[...] = ... }

reverse_compute_at(C, L): consumer C moves to the end of L's body (L a loop of C's producer)
and consumes, per iteration, the region the producers under L wrote there.
"""
from __future__ import annotations

from ...tir.arith import Simplifier
from ...tir.expr import Binary, IntImm, Var, binary, const
from ...tir.functor import collect_realizes, substitute, uses_var
from ...tir.stmt import For, SeqStmt, seq
from ..error import ScheduleError
from ..state import REMOVE
from ..trace import LoopRV, instruction
from .blocks import (access_bounds, blocks_in, build_nest, check_no_conflict, clamp_bounds,
                     injective_indices, loop_names, loops_between, range_of, reads_of,
                     union_bounds, writes_of)
from .common import loop_dom

ROOT, INLINE = "root", "inline"  # the two non-loop locations sample_compute_location can pick



def _only_writer(scope, realize, buf, what: str, primitive: str) -> None:
    """Refuse to move `realize` if another block of `scope` writes `buf` too: an init and its
    update (decompose_reduction) would change order."""
    writers = [br.block.name for br in collect_realizes(scope.body)
               if br is not realize and buf in writes_of(br.block)]
    if writers:
        raise ScheduleError(f"{what}: {buf.name} is also written by block(s) "
                            f"{', '.join(writers)}; only the one block writing a buffer can move "
                            f"({primitive} before decompose_reduction)")

def _lca_order(a, b, what: str):
    """(sequence, index of a's branch, index of b's branch) at the lowest common ancestor."""
    pa = a.parents + (a.node,)
    pb = b.parents + (b.node,)
    n = 0
    while n < min(len(pa), len(pb)) and pa[n] is pb[n]:
        n += 1
    lca = pa[n - 1]
    if not isinstance(lca, SeqStmt) or n >= len(pa) or n >= len(pb):
        raise ScheduleError(f"{what}: the block and the loop are nested in each other")
    ia = next(i for i, s in enumerate(lca.stmts) if s is pa[n])
    ib = next(i for i, s in enumerate(lca.stmts) if s is pb[n])
    return lca, ia, ib


def _check_same_scope(sch, bentry, lentry, what: str, bname: str, lname: str):
    if sch.state.scope_block_of(bentry) is not sch.state.scope_block_of(lentry):
        raise ScheduleError(f"{what}: block {bname} and loop {lname} are in different scopes")
    loop = lentry.node
    if any(p is loop for p in bentry.parents):
        raise ScheduleError(f"{what}: block {bname} is already inside loop {lname}")


def _single_output(b, what: str):
    if len(b.writes) != 1:
        raise ScheduleError(f"{what}: block {b.name} writes {len(b.writes)} buffers; only blocks "
                            "with one output can be moved")
    return b.writes[0].buffer


def _dims_of(region, iter_vars, what, bname, buf):
    mins = []
    for mn, ext in region.region:
        if ext != 1:
            raise ScheduleError(f"{what}: block {bname} accesses a range of {buf.name} per "
                                "iteration; each index must be one iteration variable")
        mins.append(mn)
    return injective_indices(mins, iter_vars, what, bname, buf.name)


def _loop_entry(sch, rv, what):
    target = sch._rv.get(rv)
    if isinstance(target, str):
        return target
    return sch._loop(rv)


def _insert(loop: For, stmt, *, before_reader_of=None, after_writer_of=None) -> For:
    children = list(loop.body.stmts) if isinstance(loop.body, SeqStmt) else [loop.body]
    if before_reader_of is not None:
        k = next((i for i, c in enumerate(children)
                  if any(before_reader_of in reads_of(b) for b in blocks_in(c))), 0)
    else:
        k = max((i + 1 for i, c in enumerate(children)
                 if any(after_writer_of in writes_of(b) for b in blocks_in(c))), default=len(children))
    body = seq(*children[:k], stmt, *children[k:])
    return For(loop.loop_var, loop.extent, loop.kind, body, loop.thread, loop.annotations)


@instruction("ComputeAt", "compute_at", inputs=("block", "loop"), attrs=("preserve_unit_loops",))
def compute_at(sch, inputs, attrs, decision):
    what = "compute_at"
    lentry = _loop_entry(sch, inputs[1], what)
    if lentry == ROOT:
        sch._block(inputs[0])
        return []
    if lentry == INLINE:
        from .inline import compute_inline
        return compute_inline(sch, inputs[:1], (), None)
    pentry = sch._block(inputs[0])
    pr, p, loop = pentry.node, pentry.node.block, lentry.node
    lname = loop.loop_var.name
    _check_same_scope(sch, pentry, lentry, what, p.name, lname)
    x = _single_output(p, what)
    _check_guard_kept(what, pentry)
    if x in sch.func.params:
        raise ScheduleError(f"{what}: block {p.name} writes {x.name}, an argument of the "
                            f"function, which must be computed whole; compute_at would compute "
                            f"only what the consumers under loop {lname} read")
    lca, ip, il = _lca_order(pentry, lentry, what)
    if ip > il:
        raise ScheduleError(f"{what}: block {p.name} runs after loop {lname}; compute_at moves a "
                            "producer into its consumers' loops (use reverse_compute_at to move a "
                            "consumer into its producer's loops)")
    scope = sch.state.scope_block_of(pentry)
    _only_writer(scope, pr, x, what, "compute_at")
    under = collect_realizes(loop.body)
    under_ids = {id(x_) for x_ in under}
    consumers = [br for br in collect_realizes(scope.body) if br is not pr and x in reads_of(br.block)]
    if not consumers:
        raise ScheduleError(f"{what}: nothing reads {x.name}, the output of block {p.name}")
    outside = [br.block.name for br in consumers if id(br) not in under_ids]
    if outside:
        raise ScheduleError(f"{what}: block(s) {', '.join(outside)} also read {x.name} but are not "
                            f"inside loop {lname}; they would miss the elements only computed "
                            "for the consumers under it")
    between = [b for s in lca.stmts[ip + 1:il] for b in blocks_in(s)]
    between += [b for b in blocks_in(lca.stmts[ip]) if b is not p]  # it leaves their nest
    inside = {id(br.block) for br in under}  # and it passes those beside the loop
    between += [b for b in blocks_in(lca.stmts[il]) if id(b) not in inside]
    check_no_conflict(what, p, between, f"loop {lname}")
    nest = _nest_for_region(sch, what, pr, p.writes[0], consumers, "reads", x, lentry,
                            bool(attrs[0]))
    sch.state.replace({pr: REMOVE, loop: _insert(loop, nest, before_reader_of=x)})
    return []


def _nest_for_region(sch, what, moving, moving_region, others, verb, x, lentry, preserve,
                     guard=None):
    """A loop nest for block `moving` covering, per iteration of the loop, the region of x
    that the blocks `others` under the loop access ("reads" or "writes"), under `guard`."""
    loop = lentry.node
    lname = loop.loop_var.name
    outer = loop_dom(lentry.parents + (loop,))
    bounds = None
    for br in others:
        entry = sch.state.block(br.block.name)
        relax = loop_dom(loops_between(entry.parents, loop))
        if x.scope == "shared":  # one tile for all threads of a GPU block, virtual ones too
            relax.update(loop_dom(tuple(p for p in lentry.parents + (loop,) if isinstance(p, For)
                                        and p.kind == "thread_binding"
                                        and p.thread.startswith(("threadIdx", "vthread")))))
        dom = loop_dom(entry.parents)
        for r in (br.block.reads if verb == "reads" else br.block.writes):
            if r.buffer is x:
                b = access_bounds(br, r.region, relax, dom)
                if b is None:
                    raise ScheduleError(f"{what}: cannot bound the region of {x.name} that block "
                                        f"{br.block.name} {verb} (a data-dependent index?)")
                bounds = union_bounds(bounds, b, outer)
    bounds = clamp_bounds(bounds, x.shape, outer)
    b = moving.block
    dims = _dims_of(moving_region, b.iter_vars, what, b.name, x)
    ranges = {}
    for v, d in dims.items():
        rng = range_of(bounds[d][0], bounds[d][1], outer)
        if rng is None:
            raise ScheduleError(f"{what}: the region of {x.name} {verb[:-1]} per iteration of "
                                f"loop {lname} has no constant size")
        ranges[v] = rng
    if verb == "writes":  # a constant index of x is consumed only where it was produced
        for (mn, _), (lo, hi) in zip(moving_region.region, bounds):
            if isinstance(mn, IntImm):
                inside = binary("and", binary("<=", lo, mn), binary("<=", mn, hi))
                guard = inside if guard is None else binary("and", guard, inside)
    return build_nest(moving, ranges, preserve, outer, loop_names(sch), guard)


@instruction("ReverseComputeAt", "reverse_compute_at", inputs=("block", "loop"),
             attrs=("preserve_unit_loops",))
def reverse_compute_at(sch, inputs, attrs, decision):
    what = "reverse_compute_at"
    lentry = _loop_entry(sch, inputs[1], what)
    if isinstance(lentry, str):
        raise ScheduleError(f"{what}: needs a loop, not the location {lentry!r}")
    centry = sch._block(inputs[0])
    cr, c, loop = centry.node, centry.node.block, lentry.node
    lname = loop.loop_var.name
    _check_same_scope(sch, centry, lentry, what, c.name, lname)
    _check_guard_kept(what, centry)
    under = collect_realizes(loop.body)
    produced = {}
    for br in under:
        for w in br.block.writes:
            if w.buffer in reads_of(c):
                produced.setdefault(w.buffer, []).append(br)
    if len(produced) != 1:
        names = ", ".join(b.name for b in produced) or "nothing"
        raise ScheduleError(f"{what}: block {c.name} must read exactly one buffer written under "
                            f"loop {lname}; it reads {names} from there")
    (x, producers), = produced.items()
    scope = sch.state.scope_block_of(centry)
    for y in writes_of(c):
        _only_writer(scope, cr, y, what, "reverse_compute_at")
    under_ids = {id(b) for b in under}
    for br in collect_realizes(scope.body):
        if x in writes_of(br.block) and id(br) not in under_ids:
            raise ScheduleError(f"{what}: block {br.block.name} also writes {x.name} outside loop "
                                f"{lname}")
    outer_loops = [p for p in lentry.parents if isinstance(p, For)] + [loop]
    outer_vars = {lp.loop_var for lp in outer_loops}
    for br in producers:
        for iv, v in zip(br.block.iter_vars, br.iter_values):
            if iv.kind == "R" and uses_var(v, outer_vars):
                raise ScheduleError(
                    f"{what}: loop {lname} (or a loop around it) drives reduction variable "
                    f"{iv.var.name} of block {br.block.name}, so {x.name} is not final inside it; "
                    "pick a loop outside the reduction loops")
    lca, il, ic = _lca_order(lentry, centry, what)
    if il > ic:
        raise ScheduleError(f"{what}: block {c.name} runs before loop {lname}; reverse_compute_at "
                            "moves a consumer into its producer's loops")
    between = [b for s in lca.stmts[il + 1:ic] for b in blocks_in(s)]
    between += [b for b in blocks_in(lca.stmts[ic]) if b is not c]  # it leaves their nest
    inside = {id(br.block) for br in under}  # and it passes those beside the loop
    between += [b for b in blocks_in(lca.stmts[il]) if id(b) not in inside]
    check_no_conflict(what, c, between, f"loop {lname}")
    region = next(r for r in c.reads if r.buffer is x)
    at = [mn for mn, _ in region.region]  # the element of x the consumer reads
    produced = None  # where the producers wrote that element in an iteration of the loop
    for br in producers:
        _check_dense(sch, what, br, x, loop)
        for cond in _written_where(sch, what, br, x, loop, at):
            produced = cond if produced is None else binary("and", produced, cond)
    for v, d in _dims_of(region, c.iter_vars, what, c.name, x).items():
        iv = next(iv for iv in c.iter_vars if iv.var is v)
        if iv.kind == "R":  # its updates would follow the producer's order, before its init
            raise ScheduleError(f"{what}: block {c.name} reduces over {x.name} (variable "
                                f"{v.name}, dimension {d}), so under loop {lname} its reduction "
                                "would be split across the loop's iterations, in the "
                                "producer's order; move the producer instead (compute_at)")
        ext = iv.extent
        if ext != x.shape[d]:  # it would compute only the elements that read x
            raise ScheduleError(f"{what}: block {c.name}'s variable {v.name} (extent {ext}) "
                                f"indexes dimension {d} of {x.name} (size {x.shape[d]}); only "
                                "a consumer whose iteration space matches the buffer can move")
    nest = _nest_for_region(sch, what, cr, region, producers, "writes", x, lentry,
                            bool(attrs[0]), produced)
    sch.state.replace({cr: REMOVE, loop: _insert(loop, nest, after_writer_of=x)})
    return []


def _check_guard_kept(what, entry):
    """The moved block gets new loops, with a predicate made from the ranges of its
    variables: a guard on its reduction loops must be one that the ranges imply (vk < K,
    the tail of a split), or it would be lost. (A partial-result block of rfactor over a
    guarded loop has one that couples its variables.)"""
    br = entry.node
    dom = loop_dom(entry.parents)
    simp = Simplifier(dom)
    red = [(iv, v) for iv, v in zip(br.block.iter_vars, br.iter_values) if iv.kind == "R"]
    rvars = {lv for lv in dom if any(uses_var(v, {lv}) for _, v in red)}
    for c in _conjuncts(br.predicate):
        if not uses_var(c, rvars):
            continue
        implied = isinstance(c, Binary) and c.op == "<" and isinstance(c.b, IntImm) and any(
            isinstance(k, IntImm) and c.b.value - k.value >= iv.extent
            for iv, v in zip(br.block.iter_vars, br.iter_values)
            for k in [simp(binary("-", c.a, v))])
        if not implied:
            raise ScheduleError(f"{what}: block {br.block.name} is guarded by {c!r}, which "
                                "its variables' ranges do not imply; moved, it would lose the "
                                "guard (rfactor a loop of a dividing split instead)")


def _conjuncts(e):
    if isinstance(e, Binary) and e.op == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def _written_where(sch, what, br, x, loop, at) -> list:
    """Conditions, on the loops outside `loop` and on the consumer's variables, under which
    block `br` (a producer under `loop`) writes the element x[at] in an iteration of `loop`:
    its predicate, with each condition on the loops inside `loop` rewritten in terms of the
    element (the tail of a split, the edge of a clamped region). `at` holds, per dimension
    of x, the consumer's variable or constant index."""
    entry = sch.state.block(br.block.name)
    relax = loop_dom(loops_between(entry.parents, loop))
    unit = {v: const(0, v.dtype) for v, (_, hi) in relax.items() if hi == 0}
    simp = Simplifier(loop_dom(entry.parents))
    vmap = {iv.var: v for iv, v in zip(br.block.iter_vars, br.iter_values)}
    index = [simp.affine(substitute(substitute(mn, vmap), unit))
             for w in br.block.writes if w.buffer is x for mn, _ in w.region]
    reducing = {v for v in relax if any(uses_var(val, {v}) for iv, val in
                                        zip(br.block.iter_vars, br.iter_values) if iv.kind == "R")}
    out = []
    for c in _conjuncts(substitute(br.predicate, unit)):
        if not uses_var(c, set(relax)):
            out.append(c)
            continue
        if not uses_var(c, set(relax) - reducing):
            continue  # a guard of the reduction (the tail of a split reduction loop)
        cond = None
        if isinstance(c, Binary) and c.op in ("<", "<=", ">", ">=", "==", "!="):
            diff = _split_terms(simp.affine(binary("-", c.a, c.b)), relax)
            for idx, where in zip(index, at):
                idx = _split_terms(idx, relax)
                if diff is not None and idx is not None and diff[0] == idx[0]:
                    # c.a - c.b == inner + rest_c and x's index == inner + rest_i, so at the
                    # element `at`: c.a - c.b == rest_c + at - rest_i
                    e = binary("-", binary("+", diff[1].to_expr(), where), idx[1].to_expr())
                    cond = binary(c.op, e, const(0, e.dtype))
                    break
        if cond is None:
            raise ScheduleError(f"{what}: block {br.block.name} is guarded inside loop "
                                f"{loop.loop_var.name} by {c!r}, which its consumer cannot "
                                f"tell from the {x.name} element it reads (a split of a "
                                "split?); pick a loop inside that guard's loops")
        out.append(cond)
    return out


def _split_terms(aff, relax):
    """({relaxed var: coef}, Affine of the rest), or None if a relaxed var is inside another
    atom (such as a // or %)."""
    inner, rest = {}, aff.copy()
    for key, (atom, coef) in aff.terms.items():
        if atom in relax:
            inner[atom] = coef
            del rest.terms[key]
        elif not isinstance(atom, Var) and uses_var(atom, set(relax)):
            return None
    return inner, rest


def _check_dense(sch, what, br, x, loop):
    """The elements of x that block `br` writes per iteration of `loop` must fill their
    bounding box, which the consumer reads: x[i0*4 + i1] over i1 < 2 leaves a gap."""
    entry = sch.state.block(br.block.name)
    relax = loop_dom(loops_between(entry.parents, loop))
    simp = Simplifier(loop_dom(entry.parents))
    vmap = {iv.var: v for iv, v in zip(br.block.iter_vars, br.iter_values)}
    for w in br.block.writes:
        if w.buffer is not x:
            continue
        for d, (mn, ext) in enumerate(w.region):
            # dense if, in order of coefficient, each term starts where the others end
            split = _split_terms(simp.affine(substitute(mn, vmap)), relax)
            terms = None if split is None else sorted(
                [(1, ext)] + [(abs(c), relax[v][1] + 1) for v, c in split[0].items()])
            reach = 0
            for coef, n in terms or ():
                if n > 1 and coef > reach + 1:
                    terms = None
                    break
                reach += coef * (n - 1)
            if terms is None:  # a gap, or a loop inside // or % (not provably dense)
                raise ScheduleError(
                    f"{what}: block {br.block.name} writes a strided region of {x.name} "
                    f"(dimension {d}) per iteration of loop {loop.loop_var.name}; its consumer "
                    "would read elements written in other iterations; pick a loop whose "
                    "iterations write whole tiles")


def _location_loops(sch, block_rv) -> list:
    """The loops every consumer of the block (a handle or a name) shares, outermost first:
    where compute_at may put it (legality is checked by trying)."""
    entry = sch._block_entry(block_rv)
    b = entry.node.block
    if len(b.writes) != 1:
        return []
    x = b.writes[0].buffer
    scope = sch.state.scope_block_of(entry)
    consumers = [br for br in collect_realizes(scope.body)
                 if br is not entry.node and x in reads_of(br.block)]
    if not consumers:
        return []
    common = None
    for br in consumers:
        loops = [p for p in sch.state.block(br.block.name).parents if isinstance(p, For)]
        common = loops if common is None else [lp for lp in common if any(lp is q for q in loops)]
    return common or []


def _legal(sch, block_rv, target) -> bool:
    trial = sch.copy()
    try:
        if target == INLINE:
            trial.apply_instruction("ComputeInline", [block_rv], [])
        elif target != ROOT:
            trial.apply_instruction("ComputeAt", [block_rv, trial._new(LoopRV, target)], [False])
        return True
    except ScheduleError:
        return False


def compute_location_candidates(sch, block_rv) -> list:
    """Loops at which compute_at(block, loop) is legal, outermost first (found by trying)."""
    return [lp.loop_var for lp in _location_loops(sch, block_rv)
            if _legal(sch, block_rv, lp.loop_var)]


def can_inline(sch, block_rv) -> bool:
    return _legal(sch, block_rv, INLINE)


@instruction("SampleComputeLocation", "sample_compute_location", inputs=("block",), pure=True,
             sampling=True)
def sample_compute_location(sch, inputs, attrs, decision):
    """decision: an index into the loops all consumers share (outermost first), -1 for where
    the block is (root), -2 for inline. Sampling tries the choices in random order and takes
    the first legal one - a uniform pick among the legal ones at the cost of a few trials. A
    given decision is not tried here: the compute_at that follows refuses an illegal one."""
    loops = [lp.loop_var for lp in _location_loops(sch, inputs[0])]
    if decision is None:
        choices = list(range(len(loops))) + [-1, -2]
        sch.rand.shuffle(choices)
        decision = next(d for d in choices
                        if d == -1 or _legal(sch, inputs[0], _target(loops, d)))
    elif not isinstance(decision, int) or not -2 <= decision < len(loops):
        shared = f", or 0..{len(loops) - 1}: a loop its consumers share" if loops else ""
        raise ScheduleError(f"sample_compute_location: decision {decision!r} is not a location "
                            f"of this block (-2 inline, -1 root{shared})")
    return [sch._new(LoopRV, _target(loops, decision))], decision


def _target(loops, decision):
    return loops[decision] if decision >= 0 else (ROOT if decision == -1 else INLINE)
