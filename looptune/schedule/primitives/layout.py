"""pack_layout: store a read-only argument in a blocked layout that its reader walks in order.

pack_layout(B, i, f) rewrites argument buffer #i that block B reads, shape (d0, ..., dn), as
(ceil(dn / f), d0, ..., dn-1, f): its last axis is cut into blocks of f, and the blocks become
the outermost axis. A kernel whose reduction covers f elements of that axis per outer
iteration (a conv's output-channel tile, a matmul's column tile) then reads one contiguous
run per tile instead of f elements out of every row, which hardware prefetchers follow.

The function's signature changes: that argument must be passed packed
(runtime.ndarray.pack_last_axis). The function records ("packed_params", ((position, f),
...)) so that whoever calls it (the tuner's runner, compile_model for a model's constant
weights) packs the data once, ahead of time. Only a graph task's constant weights are
packed by the tuner (postproc RewriteLayout).
"""
from __future__ import annotations

from math import ceil

from ...tir.buffer import Buffer
from ...tir.expr import BufferLoad
from ...tir.func import PrimFunc
from ...tir.functor import transform
from ...tir.stmt import BufferRegion, BufferStore
from ..error import ScheduleError
from ..trace import instruction

PACKED = "packed_params"


def packed_shape(shape: tuple, factor: int) -> tuple:
    return (ceil(shape[-1] / factor), *shape[:-1], factor)


def _packed_index(indices: tuple, factor: int) -> tuple:
    last = indices[-1]
    return (last // factor, *indices[:-1], last % factor)


def _packed_region(region: tuple, factor: int, blocks: int) -> tuple:
    lo, ext = region[-1]
    if ext == 1:
        tail = ((lo // factor, 1), (lo % factor, 1))
    else:
        tail = ((0, blocks), (0, factor))
    return (tail[0], *region[:-1], tail[1])


@instruction("PackLayout", "pack_layout", inputs=("block",), attrs=("read_index", "factor"))
def pack_layout(sch, inputs, attrs, decision):
    from .cache import _buffer_index
    what = "pack_layout"
    index, factor = attrs
    b = sch._block(inputs[0]).node.block
    old = _buffer_index(b.reads, index, b, "read", what)
    func = sch.func
    if old not in func.params:
        raise ScheduleError(f"{what}: {old.name} is not an argument of {func.name}; only "
                            "arguments (a model's weights) can be packed")
    if not isinstance(factor, int) or not 2 <= factor:
        raise ScheduleError(f"{what}: factor must be an int >= 2, got {factor!r}")
    pos = func.params.index(old)
    done = dict(func.attr(PACKED, ()))
    if pos in done:
        raise ScheduleError(f"{what}: {old.name} is already packed (by {done[pos]})")
    for br in (e.node for e in sch.state.index.blocks.values()):
        if any(r.buffer is old for r in br.block.writes):
            raise ScheduleError(f"{what}: block {br.block.name} writes {old.name}; only "
                                "read-only arguments can change layout")
    new = Buffer(old.name, packed_shape(old.shape, factor), old.dtype)
    blocks = new.shape[0]

    def fn(n):
        if isinstance(n, BufferLoad) and n.buffer is old:
            return BufferLoad(new, _packed_index(n.indices, factor), n.dtype)
        if isinstance(n, BufferRegion) and n.buffer is old:
            return BufferRegion(new, _packed_region(n.region, factor, blocks))
        if isinstance(n, BufferStore) and n.buffer is old:  # ruled out above
            raise AssertionError("store to a packed argument")
        return n

    params = tuple(new if p is old else p for p in func.params)
    packed = tuple(sorted({**done, pos: factor}.items()))
    attrs = tuple((k, v) for k, v in func.attrs if k != PACKED) + ((PACKED, packed),)
    sch.state.set_func(PrimFunc(func.name, params, transform(func.body, fn), attrs))
    return []
