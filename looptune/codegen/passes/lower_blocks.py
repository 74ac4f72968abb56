"""Blocks -> plain loops: substitute block variables by their bindings, turn predicates into
conditions, allocate block buffers, and place each reduction's init.

Unroll pragmas annotated on a block apply to the outermost loops inside it, or, for a block
with no loops inside, to the outermost loop of the nest around it.

A reduction's init is hoisted in front of its outermost reduction loop, inside copies of the
spatial loops below that point:

    for i: for k: for j: C[i, j] += ...      ->   for i: { for j': C[i, j'] = 0
                                                            for k: for j: C[i, j] += ... }

When a loop mixes spatial and reduction variables this is impossible, and the init runs
under the condition that every reduction variable is at its first value.
"""
from __future__ import annotations

from ...tir.arith import Simplifier
from ...tir.expr import IntImm, Var, binary, const
from ...tir.func import PrimFunc
from ...tir.functor import find_stmts, map_children, stmt_children, substitute, uses_var
from ...tir.stmt import Allocate, Block, BlockRealize, For, IfThenElse, seq, with_annotation
from .common import inside

UNROLL_KEYS = ("pragma_auto_unroll_max_step", "pragma_unroll_explicit")


def lower_blocks(func: PrimFunc) -> PrimFunc:
    root = func.root
    hoists: dict = {}
    _plan_inits(root.body, [], hoists)
    body = _Lower(hoists).stmt(root.body)
    body = _push_block_annotations(root, body)
    for buf in reversed(root.alloc_buffers):
        body = Allocate(buf, body)
    return func.with_body(body)


def _has_loop(stmt) -> bool:
    return bool(find_stmts(stmt, For, stop=For))


def _conjuncts(e):
    if hasattr(e, "op") and e.op == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def _is_true(e) -> bool:
    return isinstance(e, IntImm) and bool(e.value)


def _plan_inits(stmt, loops: list, hoists: dict):
    """Find where each reduction init goes; record {id(For): [init stmts]} or leave the
    block to the conditional fallback."""
    if isinstance(stmt, For):
        loops = loops + [stmt]
    elif isinstance(stmt, BlockRealize):
        b = stmt.block
        anns = [(k, v) for k, v in b.annotations if k in UNROLL_KEYS]
        if anns and loops and not _has_loop(b.body):
            hoists.setdefault(("ann", id(loops[0])), []).extend(anns)
        if b.init is not None:
            plan = _hoist_plan(stmt, loops)
            if plan is not None:
                loop, init = plan
                hoists.setdefault(id(loop), []).append(init)
                hoists[id(stmt)] = True
        loops = []  # a block's loops start afresh inside it
    for s in stmt_children(stmt):
        _plan_inits(s, loops, hoists)


def _hoist_plan(br: BlockRealize, loops: list):
    b = br.block
    red_vals = [v for iv, v in zip(b.iter_vars, br.iter_values) if iv.kind == "R"]
    spatial = [(iv, v) for iv, v in zip(b.iter_vars, br.iter_values) if iv.kind != "R"]
    loop_vars = {lp.loop_var for lp in loops}
    rvars = {v for v in loop_vars if any(uses_var(e, {v}) for e in red_vals)}
    if not rvars:
        return None
    p = next(i for i, lp in enumerate(loops) if lp.loop_var in rvars)
    below = loops[p + 1:]
    for _, v in spatial:
        if uses_var(v, rvars):
            return None  # a loop drives both spatial and reduction variables
    keep = []
    for c in _conjuncts(br.predicate):
        if uses_var(c, rvars):
            if uses_var(c, loop_vars - rvars):
                return None
            continue
        keep.append(c)
    fresh = {lp.loop_var: Var(lp.loop_var.name + "_init", lp.loop_var.dtype)
             for lp in below if lp.loop_var not in rvars}
    vmap = {iv.var: substitute(v, fresh) for iv, v in spatial}
    init = substitute(b.init, vmap)
    pred = const(True)
    for c in keep:
        pred = binary("and", pred, substitute(c, fresh))
    if not _is_true(pred):
        init = IfThenElse(pred, init)
    for lp in reversed(below):
        if lp.loop_var in fresh:
            kind = lp.kind if lp.kind in ("vectorized", "unrolled", "serial") else "serial"
            init = For(fresh[lp.loop_var], lp.extent, kind, init)
    return loops[p], init


class _Lower:
    def __init__(self, hoists: dict):
        self.hoists = hoists

    def stmt(self, s):
        if isinstance(s, For):
            body = self.stmt(s.body)
            ann = s.annotations
            for k, v in self.hoists.get(("ann", id(s)), ()):
                if dict(ann).get(k) is None:
                    ann = with_annotation(ann, k, v)
            out = For(s.loop_var, s.extent, s.kind, body, s.thread, ann)
            inits = self.hoists.get(id(s))
            return seq(*inits, out) if inits else out
        if isinstance(s, BlockRealize):
            return self.realize(s)
        return map_children(s, self.stmt)

    def realize(self, br: BlockRealize):
        b: Block = br.block
        vmap = {iv.var: v for iv, v in zip(b.iter_vars, br.iter_values)}
        body = self.stmt(substitute(b.body, vmap))
        if b.init is not None and id(br) not in self.hoists:
            red = [v for iv, v in zip(b.iter_vars, br.iter_values) if iv.kind == "R"]
            cond = const(True)
            for v in red:
                cond = binary("and", cond, binary("==", v, 0))
            init = substitute(b.init, vmap)
            body = seq(init if _is_true(cond) else IfThenElse(cond, init), body)
        body = _push_block_annotations(b, body)
        for buf in reversed(b.alloc_buffers):
            body = Allocate(buf, body)
        if not _is_true(br.predicate):
            body = IfThenElse(br.predicate, body)
        return body


def _push_block_annotations(block: Block, body):
    """Unroll pragmas on a block apply to the outermost loops inside it."""
    anns = [(k, v) for k, v in block.annotations if k in UNROLL_KEYS]
    if not anns:
        return body

    def push(s):
        if isinstance(s, For):
            a = s.annotations
            for k, v in anns:
                if dict(a).get(k) is None:
                    a = with_annotation(a, k, v)
            return For(s.loop_var, s.extent, s.kind, s.body, s.thread, a)
        return map_children(s, push)

    return push(body)


def simplify_conditions(stmt, dom: dict | None = None):
    """Drop conditions the loop ranges prove true (and code they prove dead)."""
    dom = dict(dom or {})

    def walk(s, dom):
        if isinstance(s, For):
            inner = inside(dom, s)
            return map_children(s, lambda x: walk(x, inner))
        if isinstance(s, IfThenElse):
            c = Simplifier(dom).cond(s.cond)
            if isinstance(c, IntImm):
                if c.value:
                    return walk(s.then_case, dom)
                return walk(s.else_case, dom) if s.else_case is not None else seq()
            return map_children(IfThenElse(c, s.then_case, s.else_case), lambda x: walk(x, dom))
        return map_children(s, lambda x: walk(x, dom))

    return walk(stmt, dom)
