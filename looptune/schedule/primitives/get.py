"""Lookups: blocks by name, the loops around a block, children, producers and consumers."""
from __future__ import annotations

from ...tir.functor import collect_realizes
from ...tir.stmt import For
from ..error import ScheduleError
from ..trace import BlockRV, LoopRV, instruction


@instruction("GetBlock", "get_block", attrs=("name",), pure=True)
def get_block(sch, inputs, attrs, decision):
    name = attrs[0]
    if not isinstance(name, str):
        raise ScheduleError(f"get_block: name must be a string, got {name!r}")
    sch.state.block(name)
    return [sch._new(BlockRV, name)]


@instruction("GetLoops", "get_loops", inputs=("block",), pure=True, list_outputs=True)
def get_loops(sch, inputs, attrs, decision):
    entry = sch._block(inputs[0])
    return [sch._new(LoopRV, p.loop_var) for p in entry.parents if isinstance(p, For)]


@instruction("GetChildBlocks", "get_child_blocks", inputs=("block_or_loop",), pure=True,
             list_outputs=True)
def get_child_blocks(sch, inputs, attrs, decision):
    entry = sch._loop_or_block(inputs[0])
    node = entry.node
    inner = node.block.body if not isinstance(node, For) else node.body
    return [sch._new(BlockRV, br.block.name) for br in collect_realizes(inner)]


def siblings(sch, name: str):
    """Blocks in the same scope as block `name`, in execution order."""
    entry = sch.state.block(name)
    scope = sch.state.scope_block_of(entry)
    return collect_realizes(scope.body)


def producers_of(sch, name: str) -> list:
    block = sch.state.block(name).node.block
    reads = {r.buffer for r in block.reads}
    return [br.block for br in siblings(sch, name)
            if br.block.name != name and any(w.buffer in reads for w in br.block.writes)]


def consumers_of(sch, name: str) -> list:
    block = sch.state.block(name).node.block
    writes = {w.buffer for w in block.writes}
    return [br.block for br in siblings(sch, name)
            if br.block.name != name and any(r.buffer in writes for r in br.block.reads)]


@instruction("GetProducers", "get_producers", inputs=("block",), pure=True, list_outputs=True)
def get_producers(sch, inputs, attrs, decision):
    name = sch._rv[inputs[0]] if sch._block(inputs[0]) else None
    return [sch._new(BlockRV, b.name) for b in producers_of(sch, name)]


@instruction("GetConsumers", "get_consumers", inputs=("block",), pure=True, list_outputs=True)
def get_consumers(sch, inputs, attrs, decision):
    name = sch._rv[inputs[0]] if sch._block(inputs[0]) else None
    return [sch._new(BlockRV, b.name) for b in consumers_of(sch, name)]
