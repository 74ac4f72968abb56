"""What the rules ask about a block: its loops' kinds, its reuse, its consumers."""
from __future__ import annotations

from ...tir.expr import BufferLoad, Select
from ...tir.functor import uses_var, visit
from ...tir.stmt import BufferStore


def loop_kinds(sch, block) -> list:
    """"S" / "R" per loop of the block (a handle or a name): the loop drives only spatial /
    only reduction variables; "O" for a loop that drives both or neither."""
    br = sch.realize(block)
    out = []
    for p in sch.enclosing_loops(block):
        kinds = {iv.kind for iv, v in zip(br.block.iter_vars, br.iter_values)
                 if uses_var(v, {p.loop_var})}
        out.append(kinds.pop() if len(kinds) == 1 else "O")
    return out


def has_reuse(block) -> bool:
    """A reduction whose inputs are each read by several spatial iterations (matmul, conv):
    the kind of block multi-level tiling pays off for."""
    if not any(iv.kind == "R" for iv in block.iter_vars):
        return False
    spatial = {iv.var for iv in block.iter_vars if iv.kind == "S"}
    for r in block.reads:
        used = set()
        for mn, _ in r.region:
            used |= {v for v in spatial if uses_var(mn, {v})}
        if used != spatial:
            return True
    return False


def is_elementwise(block) -> bool:
    return (block.init is None and all(iv.kind == "S" for iv in block.iter_vars)
            and isinstance(block.body, BufferStore))


def has_select(block) -> bool:
    found = []

    def fn(n):
        if isinstance(n, Select):
            found.append(n)
    visit(block.body, fn)
    return bool(found)


def reads_buffer(block, buf) -> bool:
    found = []

    def fn(n):
        if isinstance(n, BufferLoad) and n.buffer is buf:
            found.append(n)
    visit(block.body, fn)
    return bool(found)
