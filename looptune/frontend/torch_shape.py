"""Translations of ATen's data-movement operators: views, transposes, slicing, splitting,
concatenation, padding, indexing and resizing (see torch_ops.py for the handler convention)."""
from __future__ import annotations

import numpy as np

from .common import ImportError_
from .torch_ops import cast, expand_to, on, transpose_value


# ---------------------------------------------------------------------- shapes
@on("flatten.using_ints")
def _flatten(e, name, x, start=0, end=-1):
    return e.reshape(x, e.out_shape, name=name)


@on("view.default", "reshape.default", "_unsafe_view.default", "unsqueeze.default",
     "squeeze.dim", "squeeze.dims", "squeeze.default", "view_copy.default")
def _view(e, name, x, *rest):
    return e.reshape(x, e.out_shape, name=name)


@on("as_strided.default")
def _as_strided(e, name, x, size, stride, offset=0):
    """Only as a view of a contiguous input's bytes in order (a reshape)."""
    expect, acc = [], 1
    for s in reversed(list(size)):
        expect.append(acc)
        acc *= int(s)
    expect = expect[::-1]
    if offset or acc != int(np.prod(x.shape)) or \
            not e.node.args[0].meta["val"].is_contiguous() or any(
            int(st) != ex for st, ex, s in zip(stride, expect, size) if int(s) != 1):
        raise ImportError_(f"node {name}: as_strided with strides {list(stride)} that are not "
                           "a contiguous view")
    return e.reshape(x, e.out_shape, name=name)


@on("transpose.int")
def _transpose(e, name, x, d0, d1):
    perm = list(range(len(x.shape)))
    d0, d1 = d0 % len(perm), d1 % len(perm)
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return transpose_value(e, name, x, perm)


@on("permute.default")
def _permute(e, name, x, dims):
    return transpose_value(e, name, x, [d % len(x.shape) for d in dims])


@on("t.default")
def _t(e, name, x):
    return transpose_value(e, name, x, [1, 0]) if len(x.shape) == 2 else x


# torch's embedding, index_select and gather refuse negative indices (x[idx] wraps them)
@on("embedding.default")
def _embedding(e, name, w, ids, *rest):
    return e.op("embedding", w, cast(e, ids, "int32"), name=name, wrap=False)


@on("index_select.default")
def _index_select(e, name, x, dim, index):
    return e.op("gather", x, index, name=name, axis=int(dim) % len(x.shape), wrap=False)


@on("gather.default")
def _gather(e, name, x, dim, index, sparse_grad=False):
    return e.op("gather_elements", x, index, name=name, axis=int(dim) % len(x.shape),
                wrap=False)


@on("select.int")
def _select(e, name, x, dim, index):
    dim = dim % len(x.shape)
    index = index % x.shape[dim]
    y = e.op("slice", x, name=name + "_slice", axis=dim, start=index, stop=index + 1)
    return e.reshape(y, e.out_shape, name=name)


@on("cat.default", "concat.default")
def _cat(e, name, xs, dim=0):
    dtype = e.out_dtype
    xs = [cast(e, x, dtype) for x in xs if int(np.prod(x.shape)) != 0]
    if len(xs) == 1:
        return xs[0]
    return e.op("concat", *xs, name=name, axis=int(dim) % len(e.out_shape))


@on("stack.default")
def _stack(e, name, xs, dim=0):
    dim = dim % len(e.out_shape)
    xs = [e.reshape(x, x.shape[:dim] + (1,) + x.shape[dim:]) for x in xs]
    return e.op("concat", *xs, name=name, axis=dim)


@on("slice.Tensor")
def _slice(e, name, x, dim=0, start=None, end=None, step=1):
    dim = dim % len(x.shape)
    start, stop, step = slice(start, end, step).indices(x.shape[dim])
    if (start, stop, step) == (0, x.shape[dim], 1):
        return x
    return e.op("slice", x, name=name, axis=dim, start=start, stop=stop, step=int(step))


@on("split_with_sizes.default", "split.Tensor", "split_with_sizes_copy.default")
def _split(e, name, x, sizes, dim=0):
    dim = dim % len(x.shape)
    if isinstance(sizes, int):
        n = x.shape[dim]
        sizes = [min(sizes, n - i) for i in range(0, n, sizes)]
    out, start = [], 0
    for i, s in enumerate(sizes):
        out.append(_slice(e, f"{name}_{i}", x, dim, start, start + int(s)))
        start += int(s)
    return tuple(out)


@on("<built-in function getitem>")  # operator.getitem on a multi-output node
def _getitem(e, name, xs, i):
    if xs[i] is None:
        raise ImportError_(f"node {name}: output {i} of a multi-output operator (indices or "
                           "saved statistics) is not computed")
    return xs[i]


@on("constant_pad_nd.default")
def _pad(e, name, x, pad, value=0.0):
    nd = len(x.shape)
    before, after = [0] * nd, [0] * nd
    for i in range(len(pad) // 2):  # torch lists the last axis first
        before[nd - 1 - i], after[nd - 1 - i] = int(pad[2 * i]), int(pad[2 * i + 1])
    if min(before + after) < 0:
        raise ImportError_(f"node {name}: negative padding (cropping) is not supported")
    return e.op("pad", x, name=name, pad_before=tuple(before), pad_after=tuple(after),
                value=float(value))


@on("upsample_nearest2d.vec", "upsample_bilinear2d.vec")
def _upsample(e, name, x, output_size, *rest):
    """interpolate: nearest is asymmetric + floor, bilinear pytorch_half_pixel or
    align_corners; a given scale factor (not the sizes' ratio) maps the coordinates."""
    linear = "bilinear" in str(e.node.target)
    align, scales = (bool(rest[0]), rest[1]) if linear else (False, rest[0])
    attrs = dict(mode="linear" if linear else "nearest", sizes=e.out_shape,
                 coordinate_transformation_mode="align_corners" if align else
                 ("pytorch_half_pixel" if linear else "asymmetric"))
    if not linear:
        attrs["nearest_mode"] = "floor"
    if scales is not None and not align:
        attrs["scales"] = (1.0, 1.0) + tuple(float(f) for f in scales)
    return e.op("resize", x, name=name, **attrs)


@on("dropout.default", "contiguous.default", "clone.default", "alias.default",
     "detach.default", "lift_fresh_copy.default", "native_dropout.default")
def _identity(e, name, x, *rest, **kw):
    return (x, None) if "native_dropout" in str(e.node.target) else x


@on("expand.default", "expand_copy.default")
def _expand(e, name, x, sizes, implicit=False):
    return expand_to(e, x, e.out_shape, name)


@on("repeat.default")
def _repeat(e, name, x, reps):
    reps = tuple(int(r) for r in reps)
    x = e.reshape(x, (1,) * (len(reps) - len(x.shape)) + x.shape)
    return x if set(reps) == {1} else e.op("tile", x, name=name, reps=reps)


@on("index.Tensor")
def _index(e, name, x, indices):
    """x[..., idx, ...] with one integer index tensor: a gather along its axis."""
    axes = [i for i, v in enumerate(indices) if v is not None]
    if len(axes) != 1 or indices[axes[0]].dtype != "int32" or \
            str(e.node.args[1][axes[0]].meta["val"].dtype) == "torch.bool":
        raise ImportError_(f"node {name}: indexing with {len(axes)} index tensors or a boolean "
                           "mask; one integer index tensor is supported")
    return e.op("gather", x, indices[axes[0]], name=name, axis=axes[0])


@on("sym_size.int")
def _sym_size(e, name, x, dim):
    return x.shape[dim]
