"""Helpers for the block-level primitives: scope order, dependences, region analysis,
reduction pattern matching and rebuilding blocks."""
from __future__ import annotations

import dataclasses

from ...tir.analysis import access_regions
from ...tir.arith import Simplifier, const_extent, eval_bound
from ...tir.expr import Binary, BufferLoad, IntImm, Var, binary, const
from ...tir.functor import collect_realizes, substitute
from ...tir.stmt import Block, BlockRealize, BufferStore, For, SeqStmt
from ..error import ScheduleError
from .common import loop_dom

COMBINERS = {"+": "sum", "*": "prod", "min": "min", "max": "max"}


def block_with(b: Block, **changes) -> Block:
    return dataclasses.replace(b, **changes)


def refreshed(b: Block, **changes) -> Block:
    """A copy of block b with `changes`, its read/write regions recomputed from its body."""
    b = dataclasses.replace(b, **changes)
    reads, writes = access_regions(b.body, b.init)
    return dataclasses.replace(b, reads=reads, writes=writes)


# ---------------------------------------------------------------------------- scope order
def scope_stmts(sch, entry):
    """(scope block, its top-level statements, index of the one holding `entry`)."""
    scope = sch.state.scope_block_of(entry)
    body = scope.body
    stmts = body.stmts if isinstance(body, SeqStmt) else (body,)
    node = entry.node
    for i, s in enumerate(stmts):
        if s is node or any(p is s for p in entry.parents):
            return scope, stmts, i
    raise AssertionError("entry not found in its scope")


def blocks_in(stmt) -> list[Block]:
    return [br.block for br in collect_realizes(stmt)]


def writes_of(b: Block) -> set:
    return {w.buffer for w in b.writes}


def reads_of(b: Block) -> set:
    return {r.buffer for r in b.reads}


def check_no_conflict(what: str, moving: Block, between: list, name_of_target: str):
    """Moving `moving` past the blocks `between` must not change what anyone reads."""
    mw, mr = writes_of(moving), reads_of(moving)
    for b in between:
        if writes_of(b) & mr:
            buf = next(iter(writes_of(b) & mr)).name
            raise ScheduleError(f"{what}: block {b.name} writes {buf}, which block {moving.name} "
                                f"reads, and sits between block {moving.name} and "
                                f"{name_of_target}; moving {moving.name} past it would change "
                                "its input")
        if (reads_of(b) | writes_of(b)) & mw:
            buf = next(iter((reads_of(b) | writes_of(b)) & mw)).name
            raise ScheduleError(f"{what}: block {b.name} uses {buf}, which block {moving.name} "
                                f"writes, and sits between block {moving.name} and "
                                f"{name_of_target}")


# ---------------------------------------------------------------------------- regions
def loops_between(parents, top: For) -> list:
    """The For nodes strictly below `top` among `parents`."""
    out, seen = [], False
    for p in parents:
        if p is top:
            seen = True
        elif seen and isinstance(p, For):
            out.append(p)
    return out


def access_bounds(br: BlockRealize, region, relax: dict, dom: dict):
    """Per dimension, the symbolic (lo, hi) a block region covers as the loops in `relax`
    sweep their ranges; None if unbounded."""
    vmap = {iv.var: v for iv, v in zip(br.block.iter_vars, br.iter_values)}
    out = []
    for mn, ext in region:
        lo = substitute(mn, vmap)
        hi = binary("+", lo, const(ext - 1, lo.dtype)) if ext != 1 else lo
        blo = eval_bound(lo, relax, dom)
        bhi = eval_bound(hi, relax, dom)
        if blo is None or bhi is None:
            return None
        out.append((blo[0], bhi[1]))
    return out


def union_bounds(a, b, dom):
    if a is None:
        return b
    s = Simplifier(dom)
    return [(s(binary("min", x[0], y[0])), s(binary("max", x[1], y[1]))) for x, y in zip(a, b)]


def clamp_bounds(bounds, shape, dom):
    s = Simplifier(dom)
    out = []
    for (lo, hi), n in zip(bounds, shape):
        lo = s(binary("max", lo, const(0, lo.dtype)))
        hi = s(binary("min", hi, const(n - 1, hi.dtype)))
        out.append((lo, hi))
    return out


def build_nest(br: BlockRealize, ranges: dict, preserve_unit_loops: bool, dom: dict,
               names: set, guard=None):
    """A loop nest computing block `br` with each iteration variable over `ranges[var]`
    ((lo, hi, extent): lo + ax for ax in [0, extent), guarded by lo + ax <= hi), and
    under the condition `guard` (on outer loops and the block's variables) if given."""
    b = br.block
    loops, values, preds = [], [], []
    for iv in b.iter_vars:
        lo, hi, ext = ranges.get(iv.var, (const(0), const(iv.extent - 1), iv.extent))
        if ext == 1 and not preserve_unit_loops:
            values.append(lo)
            preds.append(binary("<=", lo, hi))  # the region may be empty at a clamped edge
            continue
        name = _fresh_name(f"ax{len(loops)}", names)
        v = Var(name, iv.var.dtype)
        loops.append(For(v, ext, "serial", None))
        value = binary("+", lo, v)
        values.append(value)
        dom = dict(dom)
        dom[v] = (0, ext - 1)
        preds.append(binary("<=", value, hi))
    s = Simplifier(dom)
    pred = const(True) if guard is None else substitute(
        guard, {iv.var: v for iv, v in zip(b.iter_vars, values)})
    for p in preds:
        pred = binary("and", pred, p)
    stmt = BlockRealize(tuple(s(v) for v in values), s(pred), b)
    for lp in reversed(loops):
        stmt = For(lp.loop_var, lp.extent, "serial", stmt)
    return stmt


def _fresh_name(base: str, names: set) -> str:
    n, i = base, 0
    while n in names:
        i += 1
        n = f"{base}_{i}"
    names.add(n)
    return n


def loop_names(sch) -> set:
    return {v.name for v in sch.state.index.loops}


def range_of(lo, hi, dom) -> tuple:
    ext = const_extent(lo, hi, dom)
    if ext is None:
        return None
    # a region that is always empty (a padded read that a condition never lets happen) still
    # gets one iteration, which the guard lo + ax <= hi skips: no loop of extent 0
    return lo, hi, max(ext, 1)


# ---------------------------------------------------------------------------- reductions
def reduction_parts(b: Block, what: str):
    """(op, store, src): block b's body must be `Y[s] = Y[s] op src` (op + * min max)."""
    body = b.body
    if b.init is None or not isinstance(body, BufferStore):
        raise ScheduleError(f"{what}: block {b.name} is not a reduction of the form "
                            "Y[...] = Y[...] op value with an init")
    v = body.value
    if isinstance(v, Binary) and v.op in COMBINERS:
        for lhs, src in ((v.a, v.b), (v.b, v.a)):
            if (isinstance(lhs, BufferLoad) and lhs.buffer is body.buffer
                    and len(lhs.indices) == len(body.indices)
                    and all(x is y or _same(x, y) for x, y in zip(lhs.indices, body.indices))):
                return v.op, body, src
    raise ScheduleError(f"{what}: block {b.name}'s update is not Y[...] = Y[...] op value "
                        "with op one of + * min max")


def _same(a, b) -> bool:
    from ...tir.structural import structural_equal
    return structural_equal(a, b)


def injective_indices(indices, iter_vars, what: str, block: str, buffer: str) -> dict:
    """{iter var: dimension} for indices that are distinct iteration variables or constants."""
    ivs = {iv.var for iv in iter_vars}
    out = {}
    for d, idx in enumerate(indices):
        if isinstance(idx, IntImm):
            continue
        if not isinstance(idx, Var) or idx not in ivs or idx in out:
            raise ScheduleError(f"{what}: block {block} accesses {buffer}[{', '.join(map(repr, indices))}]; "
                                "each index must be a distinct iteration variable of the block")
        out[idx] = d
    return out


__all__ = ["COMBINERS", "access_bounds", "block_with", "blocks_in", "build_nest",
           "check_no_conflict", "clamp_bounds", "injective_indices", "loop_dom", "loop_names",
           "loops_between", "range_of", "reads_of", "reduction_parts", "refreshed",
           "scope_stmts", "union_bounds", "writes_of"]
