"""pack_layout: store a read-only argument in a blocked layout that its reader walks in order.

pack_layout(B, i, f) rewrites argument buffer #i that block B reads, shape (d0, ..., dn), as
(ceil(dn / f), d0, ..., dn-1, f): its last axis is cut into blocks of f, and the blocks become
the outermost axis. A kernel whose reduction covers f elements of that axis per outer
iteration (a conv's output-channel tile, a matmul's column tile) then reads one contiguous
run per tile instead of f elements out of every row, which hardware prefetchers follow.
With `axis=a` another axis is cut the same way, its block index moved outermost and its
offset kept in place: (d0, .., da, .., dn) -> (ceil(da / f), d0, .., f, .., dn). Packing an
argument again packs the packed layout: an int8 weight [N][K] packed by 4 on K for VNNI,
(K/4, N, 4), then by a column tile of 64 on N is (N/64, K/4, 64, 4), each tile's groups one
run.

The function's signature changes: that argument must be passed packed
(runtime.ndarray.pack_array, or Module.pack). The function records ("packed_params",
((position, spec), ...)), spec being the factor of a single last-axis packing or the
((factor, axis), ...) steps in order, so that whoever calls it (the tuner's runner,
compile_model for a model's constant weights) packs the data once, ahead of time. Only a
graph task's constant weights are packed by the tuner's postprocessor (RewriteLayout); the
tensor-intrinsic rule packs the weights the unit reads.
"""
from __future__ import annotations

import dataclasses
from math import ceil

from ...tir.buffer import Buffer
from ...tir.expr import BufferLoad
from ...tir.func import PrimFunc
from ...tir.functor import transform
from ...tir.stmt import BlockRealize, BufferRegion, BufferStore
from ..error import ScheduleError
from ..trace import instruction

PACKED = "packed_params"


def pack_steps(spec, ndim: int) -> tuple:
    """A packing spec (module docstring) as its ((factor, axis), ...) steps; `ndim`: the
    unpacked array's."""
    return ((spec, ndim - 1),) if isinstance(spec, int) else tuple(tuple(x) for x in spec)


def _step_shape(shape: tuple, factor: int, axis: int) -> tuple:
    out = list(shape)
    out[axis] = factor
    return (ceil(shape[axis] / factor), *out)


def packed_shape(shape: tuple, spec) -> tuple:
    """The shape an array of `shape` has once packed by `spec`."""
    for factor, axis in pack_steps(spec, len(shape)):
        shape = _step_shape(tuple(shape), factor, axis)
    return tuple(shape)


def _packed_index(indices: tuple, factor: int, axis: int) -> tuple:
    x = indices[axis]
    out = list(indices)
    out[axis] = x % factor
    return (x // factor, *out)


def _packed_region(region: tuple, factor: int, axis: int, blocks: int) -> tuple:
    lo, ext = region[axis]
    out = list(region)
    if ext == 1:
        head, out[axis] = (lo // factor, 1), (lo % factor, 1)
    else:
        head, out[axis] = (0, blocks), (0, factor)
    return (head, *out)


@instruction("PackLayout", "pack_layout", inputs=("block",),
             attrs=("read_index", "factor", "axis"))
def pack_layout(sch, inputs, attrs, decision):
    from .cache import _buffer_index
    what = "pack_layout"
    index, factor = attrs[:2]
    b = sch._block(inputs[0]).node.block
    old = _buffer_index(b.reads, index, b, "read", what)
    axis = attrs[2] if len(attrs) > 2 else old.ndim - 1  # traces before `axis`: the last
    func = sch.func
    if old not in func.params:
        raise ScheduleError(f"{what}: {old.name} is not an argument of {func.name}; only "
                            "arguments (a model's weights) can be packed")
    if not isinstance(factor, int) or not 2 <= factor:
        raise ScheduleError(f"{what}: factor must be an int >= 2, got {factor!r}")
    if not isinstance(axis, int) or not 0 <= axis < old.ndim:
        raise ScheduleError(f"{what}: axis must be one of {old.name}'s axes 0..{old.ndim - 1}, "
                            f"got {axis!r}")
    pos = func.params.index(old)
    done = dict(func.attr(PACKED, ()))
    for br in (e.node for e in sch.state.index.blocks.values()):
        if any(r.buffer is old for r in br.block.writes):
            raise ScheduleError(f"{what}: block {br.block.name} writes {old.name}; only "
                                "read-only arguments can change layout")
    new = Buffer(old.name, _step_shape(old.shape, factor, axis), old.dtype)
    blocks = new.shape[0]

    def fn(n):
        if isinstance(n, BufferLoad) and n.buffer is old:
            return BufferLoad(new, _packed_index(n.indices, factor, axis), n.dtype)
        if isinstance(n, BufferRegion) and n.buffer is old:
            return BufferRegion(new, _packed_region(n.region, factor, axis, blocks))
        if isinstance(n, BufferStore) and n.buffer is old:  # ruled out above
            raise AssertionError("store to a packed argument")
        return n

    params = tuple(new if p is old else p for p in func.params)
    if pos in done:  # packed again: the steps so far, then this one
        spec = pack_steps(done[pos], old.ndim - 1) + ((factor, axis),)
    else:
        spec = factor if axis == old.ndim - 1 else ((factor, axis),)
    packed = tuple(sorted({**done, pos: spec}.items()))
    attrs = tuple((k, v) for k, v in func.attrs if k != PACKED) + ((PACKED, packed),)
    sch.state.set_func(PrimFunc(func.name, params, transform(func.body, fn), attrs))
    return []


@instruction("PermuteLayout", "permute_layout", inputs=("block",),
             attrs=("write_index", "order"))
def permute_layout(sch, inputs, attrs, decision):
    """Store intermediate buffer #write_index that the block writes with its axes in `order`
    (new axis d is old axis order[d]): every access is rewritten, so what is computed is
    unchanged. A cache_read copy of a weight whose vectorized index is not its last axis
    (a conv's output channel in [K][C][R][S]) becomes a packed panel ([C][R][S][K]) that
    the vector loop reads contiguously once compute_at has shrunk it to a tile."""
    from .cache import _buffer_index
    what = "permute_layout"
    index, order = attrs
    b = sch._block(inputs[0]).node.block
    old = _buffer_index(b.writes, index, b, "write", what)
    order = tuple(order)
    if sorted(order) != list(range(old.ndim)):
        raise ScheduleError(f"{what}: order {order} must be a permutation of the "
                            f"{old.ndim} axes of {old.name} (0..{old.ndim - 1})")
    root = sch.func.root
    if old not in root.alloc_buffers:
        raise ScheduleError(f"{what}: {old.name} is an argument of {sch.func.name} (or not "
                            "allocated by it); only intermediate buffers can change layout")
    if old.strides is not None or old.align:
        raise ScheduleError(f"{what}: {old.name} has explicit strides or storage_align rules; "
                            "permute its layout before aligning it")
    new = Buffer(old.name, tuple(old.shape[d] for d in order), old.dtype, old.scope)

    def fn(n):
        if isinstance(n, BufferLoad) and n.buffer is old:
            return BufferLoad(new, tuple(n.indices[d] for d in order), n.dtype)
        if isinstance(n, BufferStore) and n.buffer is old:
            return BufferStore(new, n.value, tuple(n.indices[d] for d in order))
        if isinstance(n, BufferRegion) and n.buffer is old:
            return BufferRegion(new, tuple(n.region[d] for d in order))
        if isinstance(n, BlockRealize) and _copies_into(n.block, new):
            # a copy's iteration variables in the new order too: loops that compute_at
            # builds for it then walk the new layout, writing it contiguously
            b = n.block
            return BlockRealize(tuple(n.iter_values[d] for d in order), n.predicate,
                                dataclasses.replace(b, iter_vars=tuple(
                                    b.iter_vars[d] for d in order)))
        return n

    allocs = tuple(new if x is old else x for x in root.alloc_buffers)
    block = dataclasses.replace(root, body=transform(root.body, fn), alloc_buffers=allocs)
    br = sch.func.body
    sch.state.set_func(sch.func.with_body(BlockRealize(br.iter_values, br.predicate, block)))
    return []


def _copies_into(block, buf) -> bool:
    """The block is `buf[v0, .., vn] = src[..]` over exactly its own variables v0..vn."""
    body = block.body
    return (isinstance(body, BufferStore) and body.buffer is buf and block.init is None
            and len(block.iter_vars) == buf.ndim
            and sorted(id(v) for v in body.indices) == sorted(id(iv.var)
                                                             for iv in block.iter_vars)
            and all(iv.kind == "S" for iv in block.iter_vars))
