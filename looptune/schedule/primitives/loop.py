"""Loop transformations: split, fuse, reorder, add_unit_loop.

    split(l, [f0, f1, f2]):  l == (l0 * f1 + l1) * f2 + l2,  guarded by l < extent(l)
    fuse(l0, l1, l2):        l0 == f // (n1*n2),  l1 == f // n2 % n1,  l2 == f % n2
"""
from __future__ import annotations

from math import prod

from ...tir import dtype as dt
from ...tir.expr import Var, binary, const
from ...tir.functor import collect_realizes, uses_var
from ...tir.stmt import For
from ..error import ScheduleError
from ..trace import LoopRV, instruction
from .common import loop_dom, rebind


def _name(loop: For) -> str:
    return loop.loop_var.name


@instruction("Split", "split", inputs=("loop", "+factors"), list_outputs=True)
def split(sch, inputs, attrs, decision):
    entry = sch._loop(inputs[0])
    loop = entry.node
    raw = inputs[1:]
    if len(raw) < 2:
        raise ScheduleError(f"split of loop {_name(loop)}: give at least two factors, got {len(raw)}")
    factors = [None if f is None else sch._int(f) for f in raw]
    if factors.count(None) > 1:
        raise ScheduleError(f"split of loop {_name(loop)}: at most one factor may be None "
                            f"(inferred), got {factors}")
    for f in factors:
        if f is not None and f < 1:
            raise ScheduleError(f"split of loop {_name(loop)}: factors must be positive, got {factors}")
    if loop.kind != "serial":
        raise ScheduleError(f"split of loop {_name(loop)}: the loop is already {loop.kind}; "
                            "split it first, then annotate the piece you want "
                            f"{loop.kind}")
    n = loop.extent
    known = prod(f for f in factors if f is not None)
    if None in factors:
        factors[factors.index(None)] = -(-n // known)
    total = prod(factors)
    limit = 2 ** (dt.bits(loop.loop_var.dtype) - 1) - 1
    if total > limit:  # the loop variable would overflow: the kernel would never end
        raise ScheduleError(f"split of loop {_name(loop)}: factors {factors} multiply to {total}, "
                            f"more than its {loop.loop_var.dtype} variable counts to ({limit}); "
                            f"use factors that multiply to about the extent {n}")
    if total < n:
        raise ScheduleError(f"split of loop {_name(loop)}: factors {factors} multiply to {total}, "
                            f"less than the loop's extent {n}; make them cover it, or pass None "
                            "for one factor to infer it")
    base = _name(loop)
    new_vars = [Var(f"{base}_{k}", loop.loop_var.dtype) for k in range(len(factors))]
    fused = const(0, loop.loop_var.dtype)
    for v, f in zip(new_vars, factors):
        fused = binary("+", binary("*", fused, const(f, loop.loop_var.dtype)), v)
    dom = loop_dom(entry.parents)
    dom.update({v: (0, f - 1) for v, f in zip(new_vars, factors)})
    guard = binary("<", fused, const(n, loop.loop_var.dtype)) if total != n else None
    body = rebind(loop.body, {loop.loop_var: fused}, dom, guard)
    for k in range(len(factors) - 1, -1, -1):
        ann = loop.annotations if k == 0 else ()
        body = For(new_vars[k], factors[k], "serial", body, None, ann)
    sch.state.replace({loop: body})
    return [sch._new(LoopRV, v) for v in new_vars]


@instruction("Fuse", "fuse", inputs=("*loops",))
def fuse(sch, inputs, attrs, decision):
    if not inputs:
        raise ScheduleError("fuse needs at least one loop")
    entries = [sch._loop(x) for x in inputs]
    loops = [e.node for e in entries]
    if len({id(x) for x in loops}) != len(loops):
        raise ScheduleError(f"fuse: a loop is listed twice ({', '.join(map(_name, loops))})")
    for outer, inner in zip(loops, loops[1:]):
        if outer.body is not inner:
            raise ScheduleError(
                f"fuse: loop {_name(inner)} is not directly nested in loop {_name(outer)} "
                "(something else sits between them, or they are in the wrong order); only "
                "adjacent loops of one nest, outermost first, can be fused")
    for x in loops:
        if x.kind != "serial":
            raise ScheduleError(f"fuse: loop {_name(x)} is {x.kind}; fuse loops before annotating")
    if len(loops) == 1:
        return [inputs[0]]
    dtype = loops[0].loop_var.dtype
    name = "_".join(_name(x) for x in loops) + "_fused"
    f = Var(name, dtype)
    extents = [x.extent for x in loops]
    vmap = {}
    for k, x in enumerate(loops):
        inner = prod(extents[k + 1:])
        e = binary("//", f, const(inner, dtype)) if inner > 1 else f
        if k > 0:
            e = binary("%", e, const(extents[k], dtype))
        vmap[x.loop_var] = e
    dom = loop_dom(entries[0].parents)
    dom[f] = (0, prod(extents) - 1)
    body = rebind(loops[-1].body, vmap, dom)
    new = For(f, prod(extents), "serial", body, None, loops[0].annotations)
    sch.state.replace({loops[0]: new})
    return [sch._new(LoopRV, f)]


@instruction("Reorder", "reorder", inputs=("*loops",))
def reorder(sch, inputs, attrs, decision):
    entries = [sch._loop(x) for x in inputs]
    loops = [e.node for e in entries]
    if len({id(x) for x in loops}) != len(loops):
        raise ScheduleError(f"reorder: a loop is listed twice ({', '.join(map(_name, loops))})")
    if len(loops) < 2:
        return []
    by_depth = sorted(zip(entries, loops), key=lambda el: len(el[0].parents))
    top_entry, top = by_depth[0]
    bottom_entry, bottom = by_depth[-1]
    chain_above = bottom_entry.parents
    if not _contains(chain_above, top):
        raise ScheduleError(
            f"reorder: loops {', '.join(map(_name, loops))} are not in one loop nest (loop "
            f"{_name(bottom)} is not inside loop {_name(top)}); only loops of the same nest can "
            "be reordered")
    start = _index(chain_above, top)
    chain = list(chain_above[start:]) + [bottom]
    for outer, inner in zip(chain, chain[1:]):
        if not isinstance(outer, For) or not isinstance(inner, For) or outer.body is not inner:
            what = type(inner).__name__ if not isinstance(inner, For) else "a sequence of statements"
            raise ScheduleError(
                f"reorder: the loops between {_name(top)} and {_name(bottom)} are not a perfect "
                f"nest ({what} sits between loop {_name(outer)} and the next); move other "
                "blocks out first or reorder within a perfect nest")
    for x in loops:
        if not _contains(chain, x):
            raise ScheduleError(f"reorder: loop {_name(x)} is not in the nest of {_name(top)}")
    positions = sorted(_index(chain, x) for x in loops)
    new_chain = list(chain)
    for pos, x in zip(positions, loops):
        new_chain[pos] = x
    _check_mixed_order(chain, new_chain, bottom)
    body = bottom.body
    for x in reversed(new_chain):
        body = For(x.loop_var, x.extent, x.kind, body, x.thread, x.annotations)
    sch.state.replace({top: body})
    return []


def _check_mixed_order(chain, new_chain, bottom):
    """Refuse to swap two loops driving one variable of a block when either also drives
    both spatial and reduction variables (a fused loop, or a piece of one): the first
    update of an element could then come before its init (which runs when the reduction
    variables are at their first value)."""
    for br in collect_realizes(bottom.body):
        drives = {}
        for lp in chain:
            ivs = [iv for iv, v in zip(br.block.iter_vars, br.iter_values)
                   if uses_var(v, {lp.loop_var})]
            drives[id(lp)] = ({id(iv) for iv in ivs}, len({iv.kind for iv in ivs}) > 1)
        for a in range(len(chain)):
            for b in range(a + 1, len(chain)):
                x, y = chain[a], chain[b]
                (dx, mx), (dy, my) = drives[id(x)], drives[id(y)]
                if (mx or my) and dx & dy and _index(new_chain, x) > _index(new_chain, y):
                    raise ScheduleError(
                        f"reorder: loops {_name(x)} and {_name(y)} both drive a variable of "
                        f"block {br.block.name}, and one of them drives both its spatial and "
                        "its reduction variables (a fused loop); their order must stay")


def _contains(xs, x) -> bool:
    return any(y is x for y in xs)


def _index(xs, x) -> int:
    for i, y in enumerate(xs):
        if y is x:
            return i
    raise ValueError


@instruction("AddUnitLoop", "add_unit_loop", inputs=("block_or_loop",))
def add_unit_loop(sch, inputs, attrs, decision):
    entry = sch._loop_or_block(inputs[0])
    node = entry.node
    base = node.loop_var.name if isinstance(node, For) else node.block.name
    v = Var(f"{base}_u")
    sch.state.replace({node: For(v, 1, "serial", node)})
    return [sch._new(LoopRV, v)]


