"""Quantized matrix products on the CPU's int8 units.

The ONNX importer (frontend/onnx_quant.py) computes a quantized model exactly with int32
tensors: a quantized activation is `cast(clip(round(...), lo, hi), int32)`, a MatMulInteger or
QLinearMatMul is matmul((q - zp), w - zw) in int32 with the weight's difference a constant.
That is exact but reads 4 bytes per value and multiplies in int32. `int8_matmuls` rewrites
each such matmul whose weight fits int8 into the form the units take (VNNI's and AMX's u8 x
s8 -> s32):

    (q - zp) @ w  ==  u8(q + off) @ s8(w)  -  (off + zp) * colsum(w)

with off = 0 for a uint8-ranged q and 128 for an int8-ranged one (the usual compensation:
the units multiply unsigned by signed bytes). The u8 cast fuses into the kernel that
quantizes q, which then writes one byte per value; the weight is stored once as int8 [N][K]
(packed for the unit at compile time); the compensation is a constant per output column (or,
with a zero point computed at run time, DynamicQuantizeLinear's, a product with it) and
fuses into the matmul's epilogue with the requantization after it. The result is the same
int32 tensor, bit for bit.
"""
from __future__ import annotations

import numpy as np

from .ir import Graph, rebuild

VIEWS = ("reshape",)
FLOAT_EXACT = 2 ** 24  # float32 holds every integer up to this exactly
UNIT_COLUMNS = 16  # output channels a convolution needs in whole multiples for the int8
                   # units' register tiles (16 int32 lanes; AMX and 8-lane units divide it)


def _range_of(v) -> tuple | None:
    """The value range of an int32 tensor that holds 8-bit values: (lo, hi) from the clip
    before its cast, or from the 8-bit type it was cast from; None if unknown."""
    p = v.producer
    if p is None or p.op != "cast" or v.dtype != "int32":
        return None
    src = p.inputs[0]
    if src.dtype in ("uint8", "int8"):
        info = np.iinfo(src.dtype)
        return int(info.min), int(info.max)
    q = src.producer
    if q is not None and q.op == "clip" and "min" in q.attrs and "max" in q.attrs:
        return float(q.attrs["min"]), float(q.attrs["max"])
    return None


def _shifted(a):
    """(q, zero point: an int, a Value or None, the views between) of a matmul operand
    `views(q - zp)` or `views(q)`."""
    views = []
    while a.producer is not None and a.producer.op in VIEWS:
        views.append(a.producer)
        a = a.producer.inputs[0]
    p = a.producer
    if p is not None and p.op == "sub" and len(p.inputs) == 2:
        q, zp = p.inputs
        if zp.is_const:
            if zp.data.size != 1:
                return None  # a zero point per row: not folded here
            zp = int(np.asarray(zp.data).reshape(-1)[0])
        elif zp.type.size != 1:
            return None
        return q, zp, views[::-1]
    if p is not None and p.op == "sub" and "scalar" in p.attrs and not p.attrs.get("reverse"):
        return p.inputs[0], int(p.attrs["scalar"]), views[::-1]
    return a, 0, views[::-1]


def int8_products(graph: Graph) -> Graph:
    """The graph with its int32 matmuls and convolutions of 8-bit operands on u8 x s8
    (module docstring)."""
    def rewrite(g, node, get):
        if node.output.dtype != "int32":
            return None
        if node.op == "matmul" and not node.attrs.get("transpose_a"):
            return _rewrite(g, node, get)
        if node.op == "conv2d" and node.attrs.get("weight_layout", "KCRS") == "KCRS" \
                and node.attrs.get("layout", "NCHW") == "NCHW" and len(node.inputs) == 2:
            return _rewrite_conv(g, node, get)
        return None
    return rebuild(graph, rewrite)


def _int(g, name, value):
    return g.const(name, np.array([value], np.int32))  # int32 arithmetic stays int32


def _int8_weight(b):
    """A constant integer weight's values as int8, or None when they do not fit."""
    if not b.is_const:
        return None
    w = np.asarray(b.data)
    if not np.issubdtype(w.dtype, np.integer) or w.size == 0 or w.min() < -128 \
            or w.max() > 127:
        return None
    return w.astype(np.int8)


def _offset(q):
    """0 for a uint8-ranged q, 128 for an int8-ranged one, None for another or unknown."""
    rng = _range_of(q)
    if rng is None:
        return None
    if rng[0] >= 0 and rng[1] <= 255:
        return 0
    if rng[0] >= -128 and rng[1] <= 127:
        return 128
    return None


def _as_u8(g, name, x, off):
    if off:
        x = g.op("add", x, _int(g, name + "_offset", off), name=name + "_u8_offset")
    return g.op("cast", x, name=name + "_u8", dtype="uint8")


def _rewrite_conv(g, node, get):
    """conv(q - zp, w) == conv(u8(q + off) padded with zp + off, s8(w)) - (zp + off) *
    sum(w[k]): the padding holds the shifted zero point, so a padded position contributes
    (zp + off) * w there as every other position's compensation assumes; one constant per
    output channel. A zero point computed at run time is left to the int32 kernel."""
    a, b = node.inputs
    w8 = _int8_weight(b)
    found = _shifted(a)
    if w8 is None or w8.ndim != 4 or found is None or found[2] or not isinstance(found[1], int):
        return None
    q, zp, _ = found
    off = _offset(q)
    if off is None:
        return None
    name, shift = node.name, off + zp
    groups = int(node.attrs.get("groups", 1))
    if (w8.shape[1] % 4 or w8.shape[0] % UNIT_COLUMNS or groups > 1) \
            and w8[0].size * 255 * 128 <= FLOAT_EXACT:
        # no unit takes it (the first layer's 3 channels, output channels in no whole
        # number of a unit's columns, a depthwise or grouped filter, which stay NCHW):
        # summed in float32, exact below 2**24, by the float kernels
        x = g.op("cast", get(a), name=name + "_f32", dtype="float32")
        acc = g.op("conv2d", x, g.const(name + "_f32w", w8.astype(np.float32)), name=name,
                   **node.attrs)
        return g.op("cast", acc, name=name + "_int", dtype="int32")
    x = _as_u8(g, name, get(q), off)
    padding = node.attrs.get("padding", 0)
    attrs = dict(node.attrs)
    if shift and (padding if isinstance(padding, int) else any(padding)):
        attrs["pad_value"] = shift
    acc = g.op("conv2d", x, g.const(name + "_s8", w8), name=name, **attrs)
    per_k = w8.astype(np.int64).sum(axis=(1, 2, 3))  # over each filter's window and channels
    comp = shift * per_k
    if not np.any(comp):
        return acc
    return g.op("sub", acc, g.const(name + "_compensation",
                                     comp.astype(np.int32).reshape(1, -1, 1, 1)),
                name=name + "_compensated")


def _rewrite(g, node, get):
    a, b = node.inputs
    w = _int8_weight(b)
    found = _shifted(a)
    if w is None or w.ndim != 2 or found is None:
        return None
    q, zp, views = found
    off = _offset(q)
    if off is None:
        return None
    w8 = np.ascontiguousarray(w if node.attrs.get("transpose_b") else w.T)
    name = node.name
    x = _as_u8(g, name, get(q), off)
    for view in views:
        x = g.op(view.op, x, name=view.name + "_u8", **view.attrs)
    acc = g.op("matmul", x, g.const(name + "_s8", w8), name=name, transpose_b=True)
    colsum = w8.astype(np.int64).sum(axis=1).astype(np.int32)  # over K, per output column
    if isinstance(zp, int):
        shift = (off + zp) * colsum.astype(np.int64)
        if np.any(shift):
            acc = g.op("sub", acc, g.const(name + "_compensation", shift.astype(np.int32)),
                       name=name + "_compensated")
        return acc
    z = get(zp)
    if off:
        z = g.op("add", z, _int(g, name + "_zp_offset", off), name=name + "_zp_offset")
    shift = g.op("mul", g.const(name + "_colsum", colsum), z, name=name + "_compensation")
    return g.op("sub", acc, shift, name=name + "_compensated")
