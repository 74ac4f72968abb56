"""create_prim_func: a graph of tensor expressions -> an unscheduled PrimFunc.

Each compute becomes one block in a loop nest of its own: spatial loops over the output
axes, then reduction loops; the block's iteration variables are bound to those loops.
"""
from __future__ import annotations

from ..tir.analysis import access_regions
from ..tir.expr import BufferLoad, Reduce, Var, binary
from ..tir.func import PrimFunc
from ..tir.functor import substitute
from ..tir.stmt import TRUE, Block, BlockRealize, BufferStore, For, IterVar, seq
from .tensor import ComputeOp, PlaceholderOp, TEError, Tensor

_COMBINE = {"sum": "+", "prod": "*", "max": "max", "min": "min"}


def _topo(outputs) -> list:
    order, state = [], {}

    def dfs(t: Tensor):
        s = state.get(id(t))
        if s == 2:
            return
        if s == 1:
            raise TEError(f"tensor {t.name} depends on itself")
        state[id(t)] = 1
        if isinstance(t.op, ComputeOp):
            for x in t.op.inputs:
                dfs(x)
        state[id(t)] = 2
        order.append(t)

    for t in outputs:
        dfs(t)
    return order


def _unique(name: str, used: set) -> str:
    out, i = name, 1
    while out in used:
        out = f"{name}_{i}"
        i += 1
    used.add(out)
    return out


def create_prim_func(tensors, name: str | None = None) -> PrimFunc:
    """Arguments are `tensors` in order (inputs and outputs); other computes reachable from
    them become intermediate buffers allocated inside the function."""
    tensors = list(tensors)
    if not tensors:
        raise TEError("create_prim_func needs the list of argument tensors")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TEError(f"create_prim_func: {t!r} is not a te.Tensor")
    arg_ids = {id(t) for t in tensors}
    if len(arg_ids) != len(tensors):
        raise TEError("create_prim_func: a tensor is listed twice among the arguments")
    order = _topo(tensors)
    for t in order:
        if isinstance(t.op, PlaceholderOp) and id(t) not in arg_ids:
            raise TEError(f"placeholder {t.name} is read but not passed to create_prim_func; "
                          "add it to the argument list")
    computes = [t for t in order if isinstance(t.op, ComputeOp)]
    if not computes:
        raise TEError("create_prim_func: there is nothing to compute (only placeholders)")
    used: set = set()
    nests = [_nest(t, _unique(t.op.name, used)) for t in computes]
    intermediates = tuple(t.buffer for t in computes if id(t) not in arg_ids)
    root = Block("root", (), (), (), seq(*nests), None, intermediates)
    fname = name or computes[-1].op.name
    return PrimFunc(fname, tuple(t.buffer for t in tensors), BlockRealize((), TRUE, root))


def _nest(t: Tensor, block_name: str):
    op: ComputeOp = t.op
    axes = list(op.axis) + list(op.reduce_axis)
    loops = [Var(iv.var.name) for iv in axes]
    ivs = tuple(IterVar(Var("v" + iv.var.name), iv.extent, iv.kind) for iv in axes)
    vmap = {iv.var: biv.var for iv, biv in zip(axes, ivs)}
    idx = tuple(biv.var for biv in ivs[:len(op.axis)])
    buf = t.buffer
    init = None
    if isinstance(op.body, Reduce):
        src = substitute(op.body.source, vmap)
        update = binary(_COMBINE[op.body.combiner], BufferLoad(buf, idx, buf.dtype), src)
        body = BufferStore(buf, update, idx)
        init = BufferStore(buf, op.body.identity, idx)
    else:
        body = BufferStore(buf, substitute(op.body, vmap), idx)
    reads, writes = access_regions(body, init)
    annotations = tuple(op.attrs)
    block = Block(block_name, ivs, reads, writes, body, init, (), annotations)
    stmt = BlockRealize(tuple(loops), TRUE, block)
    for v, iv in reversed(list(zip(loops, axes))):
        stmt = For(v, iv.extent, "serial", stmt)
    return stmt
