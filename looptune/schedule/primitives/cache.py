"""Caches and storage: cache_read, cache_write, set_scope, storage_align.

cache_read(B, i, scope): a new block copies B's read buffer #i into a new `scope` buffer,
which B reads instead. cache_write(B, i, scope): B writes a new `scope` buffer, copied back
by a new block after it. The copies cover whole buffers; compute_at / reverse_compute_at then
shrink them to a tile, and lowering compacts the buffer to that tile (a register tile for
scope "local").
"""
from __future__ import annotations

import dataclasses

from ...tir.buffer import SCOPES, Buffer
from ...tir.expr import BufferLoad, Var
from ...tir.functor import replace_buffers
from ...tir.stmt import TRUE, Block, BlockRealize, BufferStore, For, IterVar, SeqStmt, seq
from ..error import ScheduleError
from ..trace import BlockRV, instruction
from .blocks import blocks_in, reads_of, refreshed, scope_stmts, writes_of
from .inline import add_alloc


def _check_scope(scope: str, what: str):
    if scope not in SCOPES:
        raise ScheduleError(f"{what}: unknown storage scope {scope!r}; use one of {', '.join(SCOPES)}")


def _unique_block_name(sch, base: str) -> str:
    names = sch.state.index.blocks
    n, i = base, 0
    while n in names:
        i += 1
        n = f"{base}_{i}"
    return n


def copy_nest(name: str, dst: Buffer, src: Buffer):
    """A loop nest with a block copying all of src into dst (same shape)."""
    ivs = tuple(IterVar(Var(f"v{d}"), n, "S") for d, n in enumerate(src.shape))
    idx = tuple(iv.var for iv in ivs)
    body = BufferStore(dst, BufferLoad(src, idx, src.dtype), idx)
    block = refreshed(Block(name, ivs, (), (), body))
    loops = [Var(f"ax{d}") for d in range(len(ivs))]
    stmt = BlockRealize(tuple(loops), TRUE, block)
    for v, iv in reversed(list(zip(loops, ivs))):
        stmt = For(v, iv.extent, "serial", stmt)
    return stmt


def _insert_at_scope(sch, scope_name: str, index: int, stmt):
    """Put `stmt` at position `index` of the scope block's top-level statements."""
    entry = sch.state.block(scope_name)
    br = entry.node
    body = br.block.body
    stmts = list(body.stmts) if isinstance(body, SeqStmt) else [body]
    stmts.insert(index, stmt)
    sch.state.replace({br: BlockRealize(br.iter_values, br.predicate,
                                        dataclasses.replace(br.block, body=seq(*stmts)))})


def _buffer_index(regions, index: int, b: Block, kind: str, what: str):
    if not isinstance(index, int) or not 0 <= index < len(regions):
        names = ", ".join(f"{i}: {r.buffer.name}" for i, r in enumerate(regions)) or "none"
        raise ScheduleError(f"{what}: block {b.name} has no {kind} buffer #{index} "
                            f"({kind} buffers: {names})")
    return regions[index].buffer


@instruction("CacheRead", "cache_read", inputs=("block",),
             attrs=("read_buffer_index", "storage_scope"))
def cache_read(sch, inputs, attrs, decision):
    what = "cache_read"
    index, scope = attrs
    _check_scope(scope, what)
    entry = sch._block(inputs[0])
    b = entry.node.block
    x = _buffer_index(b.reads, index, b, "read", what)
    scope_block, stmts, pos = scope_stmts(sch, entry)
    for other in blocks_in(stmts[pos]):
        if other is not b and x in writes_of(other):
            raise ScheduleError(f"{what}: {x.name} is written by block {other.name} inside the "
                                f"same loop nest as block {b.name}; cache it before moving its "
                                "producer there")
    return _redirect(sch, entry, scope_block, x, scope, pos, into_cache=True)


def _redirect(sch, entry, scope_block, buf, scope: str, position: int, *, into_cache: bool):
    """Point the block at a new `scope` copy of buf, and put the block copying buf into the
    copy (into_cache) or back out of it at `position` among the scope's statements."""
    br, b = entry.node, entry.node.block
    cached = Buffer(f"{buf.name}_{scope}", buf.shape, buf.dtype, scope)
    name = _unique_block_name(sch, f"{buf.name}_{scope}")
    nb = refreshed(b, body=replace_buffers(b.body, {buf: cached}),
                   init=None if b.init is None else replace_buffers(b.init, {buf: cached}))
    sch.state.replace({br: BlockRealize(br.iter_values, br.predicate, nb)})
    nest = copy_nest(name, cached, buf) if into_cache else copy_nest(name, buf, cached)
    _insert_at_scope(sch, scope_block.name, position, nest)
    add_alloc(sch, scope_block.name, cached)
    return [sch._new(BlockRV, name)]


@instruction("CacheWrite", "cache_write", inputs=("block",),
             attrs=("write_buffer_index", "storage_scope"))
def cache_write(sch, inputs, attrs, decision):
    what = "cache_write"
    index, scope = attrs
    _check_scope(scope, what)
    entry = sch._block(inputs[0])
    b = entry.node.block
    y = _buffer_index(b.writes, index, b, "write", what)
    scope_block, stmts, pos = scope_stmts(sch, entry)
    for other in blocks_in(scope_block.body):
        if other is b:
            continue
        if y in writes_of(other):
            raise ScheduleError(f"{what}: {y.name} is also written by block {other.name}; cache "
                                "the write before decompose_reduction / rfactor")
    for other in blocks_in(stmts[pos]):
        if other is not b and y in reads_of(other):
            raise ScheduleError(f"{what}: block {other.name} reads {y.name} inside the same loop "
                                f"nest as block {b.name}; cache the write before moving the "
                                "consumer there")
    return _redirect(sch, entry, scope_block, y, scope, pos + 1, into_cache=False)


def _rewrite_buffer(sch, old: Buffer, new: Buffer, what: str):
    """Replace an intermediate buffer everywhere, allocation included."""
    root = sch.func.root
    if old not in root.alloc_buffers:
        raise ScheduleError(f"{what}: {old.name} is an argument of the function (or not "
                            "allocated by it); only intermediate buffers can change layout or scope")
    allocs = tuple(new if x is old else x for x in root.alloc_buffers)
    block = dataclasses.replace(root, body=replace_buffers(root.body, {old: new}),
                                alloc_buffers=allocs)
    br = sch.func.body
    sch.state.set_func(sch.func.with_body(BlockRealize(br.iter_values, br.predicate, block)))


@instruction("SetScope", "set_scope", inputs=("block",), attrs=("buffer_index", "storage_scope"))
def set_scope(sch, inputs, attrs, decision):
    what = "set_scope"
    index, scope = attrs
    _check_scope(scope, what)
    b = sch._block(inputs[0]).node.block
    old = _buffer_index(b.writes, index, b, "write", what)
    _rewrite_buffer(sch, old, dataclasses.replace(old, scope=scope), what)
    return []


@instruction("StorageAlign", "storage_align", inputs=("block",),
             attrs=("buffer_index", "axis", "factor", "offset"))
def storage_align(sch, inputs, attrs, decision):
    what = "storage_align"
    index, axis, factor, offset = attrs
    b = sch._block(inputs[0]).node.block
    old = _buffer_index(b.writes, index, b, "write", what)
    if not -old.ndim <= axis < old.ndim:
        raise ScheduleError(f"{what}: axis {axis} is out of range for {old.name}, which has "
                            f"{old.ndim} dimensions")
    if factor < 1 or not 0 <= offset < factor:
        raise ScheduleError(f"{what}: need factor >= 1 and 0 <= offset < factor, got factor "
                            f"{factor}, offset {offset}")
    axis %= old.ndim
    rules = tuple(r for r in old.align if r[0] != axis) + ((axis, factor, offset),)
    _rewrite_buffer(sch, old, dataclasses.replace(old, align=rules), what)
    return []
