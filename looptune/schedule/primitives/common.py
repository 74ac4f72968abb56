"""Helpers shared by the primitives: rebinding blocks after loop changes, loop domains."""
from __future__ import annotations

from ...tir.arith import Simplifier
from ...tir.expr import binary
from ...tir.functor import map_children, substitute, uses_var
from ...tir.stmt import BlockRealize, For, IfThenElse, TRUE
from ..error import ScheduleError


def loop_dom(parents) -> dict:
    """{loop var: (0, extent - 1)} for the For nodes among `parents`."""
    return {p.loop_var: (0, p.extent - 1) for p in parents if isinstance(p, For)}


def rebind(stmt, vmap: dict, dom: dict, extra_pred=None):
    """Substitute loop variables in the bindings and predicates of every block under `stmt`
    (block bodies are left alone: they only use block variables), AND-ing `extra_pred` into
    the predicates, and simplify with the loop ranges in `dom` (plus loops inside `stmt`)."""
    if isinstance(stmt, For):
        inner = dict(dom)
        inner[stmt.loop_var] = (0, stmt.extent - 1)
        body = rebind(stmt.body, vmap, inner, extra_pred)  # direct: split and fuse run this
        return map_children(stmt, lambda _: body)
    if isinstance(stmt, BlockRealize):
        simp = Simplifier(dom)
        values = tuple(simp(substitute(v, vmap)) for v in stmt.iter_values)
        pred = substitute(stmt.predicate, vmap)
        if extra_pred is not None:
            pred = binary("and", pred, extra_pred)
        pred = simp(pred)
        return BlockRealize(values, pred, stmt.block)
    if isinstance(stmt, IfThenElse):
        stmt = IfThenElse(substitute(stmt.cond, vmap), stmt.then_case, stmt.else_case)
    return map_children(stmt, lambda s: rebind(s, vmap, dom, extra_pred))


def check_data_parallel(loop: For, realizes, what: str):
    """Refuse to parallelize/vectorize a loop that drives a reduction variable."""
    for br in realizes:
        for iv, value in zip(br.block.iter_vars, br.iter_values):
            if iv.kind == "R" and uses_var(value, {loop.loop_var}):
                raise ScheduleError(
                    f"cannot {what} loop {loop.loop_var.name}: it drives reduction variable "
                    f"{iv.var.name} of block {br.block.name}, so iterations would race on the "
                    f"accumulator; {what} a spatial loop, or rfactor the reduction first")


def is_trivial(pred) -> bool:
    return pred is TRUE or (getattr(pred, "dtype", None) == "bool" and getattr(pred, "value", None) is True)
