"""channels_last: keep a convolutional network's activations in (N, H, W, C) between layers.

A convolution with constant weights in (C, R, S, K) (constant_weight_layouts) computes its
output channels-last anyway, to vectorize over them. In NCHW every such kernel then writes
its output transposed, and the next one reads its input with a stride of H*W between
channels. This pass makes the convolutions (depthwise ones too), the pooling layers, concatenations,
reductions (a squeeze-excite's global mean) and the elementwise layers between them (bias,
residual add, relu, a broadcast scale) work on NHWC values: the first convolution reads
the NCHW input and writes NHWC ("NCHW-NHWC"), and a value leaves NHWC (one transpose) only
where an operator that does not know the layout reads it (flatten, a graph output, ...).
Constants of elementwise layers are transposed once, at compile time.
"""
from __future__ import annotations

import numpy as np

from .ir import Graph, GraphBuilder
from .op import get_graph_op
from .op.nn import CHANNELS_LAST_WEIGHTS, TO_NCHW, TO_NHWC

POOLS = ("max_pool2d", "avg_pool2d")
REDUCTIONS = ("mean", "sum", "max")
NHWC_AXIS = {0: 0, 1: 3, 2: 1, 3: 2}  # an NCHW axis's position in NHWC


def _channels_last_conv(node) -> bool:
    return node.op == "conv2d" and node.attrs.get("weight_layout") in CHANNELS_LAST_WEIGHTS \
        and node.attrs.get("layout", "NCHW") == "NCHW" and node.inputs[1].is_const


def channels_last(graph: Graph) -> Graph:
    if not any(_channels_last_conv(n) for n in graph.nodes):
        return graph
    g = GraphBuilder(graph.name)
    vmap: dict = {id(v): g.input(v.name, v.shape, v.dtype) for v in graph.inputs}
    nhwc: set = set()      # ids of new values held channels-last
    back: dict = {}        # id(NHWC value) -> its NCHW transpose, made once
    ahead: dict = {}       # id(NCHW value) -> its NHWC transpose, made once

    def get(v):
        return v if v.is_const else vmap[id(v)]

    def as_nchw(v):
        if id(v) not in nhwc:
            return v
        if id(v) not in back:
            back[id(v)] = g.op("transpose", v, name=v.name + "_nchw", perm=TO_NCHW)
        return back[id(v)]

    def elementwise_arg(v, ndim: int):
        """An elementwise operand next to an NHWC value; None when it cannot follow."""
        if id(v) in nhwc:
            return v
        if v.is_const and len(v.shape) <= ndim == 4:
            data = v.data.reshape((1,) * (4 - v.data.ndim) + v.data.shape)
            return g.const(v.name + "_nhwc", np.ascontiguousarray(np.transpose(data, TO_NHWC)))
        if len(v.shape) == 4:  # an NCHW activation (a block's input as its shortcut)
            if id(v) not in ahead:
                ahead[id(v)] = g.op("transpose", v, name=v.name + "_nhwc", perm=TO_NHWC)
                nhwc.add(id(ahead[id(v)]))
            return ahead[id(v)]
        return None

    for node in graph.nodes:
        args = [get(v) for v in node.inputs]
        attrs = dict(node.attrs)
        kind = get_graph_op(node.op).kind
        out = None
        if _channels_last_conv(node):
            attrs["layout"] = "NHWC" if id(args[0]) in nhwc else "NCHW-NHWC"
            out = g.op(node.op, *args, name=node.name, **attrs)
        elif node.op in POOLS and id(args[0]) in nhwc:
            out = g.op(node.op, args[0], name=node.name, **attrs, layout="NHWC")
        elif node.op in REDUCTIONS and args and id(args[0]) in nhwc:
            out = _reduction(g, node, args[0], attrs, nhwc)
        elif node.op == "transpose" and tuple(attrs["perm"]) == TO_NCHW \
                and id(args[0]) not in nhwc and not args[0].is_const:
            # a model's own permute back to NCHW (ConvNeXt's blocks compute channels-last
            # between two permutes): its input already is the NHWC value; a view names it
            out = g.op("reshape", args[0], name=node.name, shape=args[0].shape)
        elif node.op == "concat" and any(id(a) in nhwc for a in args) \
                and all(len(a.shape) == 4 for a in args):
            moved = [elementwise_arg(a, 4) for a in args]
            attrs["axis"] = NHWC_AXIS[attrs.get("axis", 0) % 4]
            out = g.op(node.op, *moved, name=node.name, **attrs)
        elif kind == "elementwise" and any(id(a) in nhwc for a in args):
            moved = [elementwise_arg(a, 4) for a in args]
            if all(m is not None for m in moved):
                out = g.op(node.op, *moved, name=node.name, **attrs)
                if len(out.shape) != 4:
                    raise AssertionError(f"{node}: channels-last elementwise output {out}")
        if out is None:
            out = g.op(node.op, *[as_nchw(a) for a in args], name=node.name, **attrs)
        elif len(out.shape) == 4 and node.op not in REDUCTIONS:
            nhwc.add(id(out))
        vmap[id(node.output)] = out
    return g.finish(*[as_nchw(get(v)) for v in graph.outputs])


def _reduction(g, node, x, attrs, nhwc: set):
    """A reduction over axes of an NHWC value: the same axes, renumbered; its output stays
    NHWC when it keeps its dims, and needs no transpose when the kept axes keep their order
    (a global pool's (N, C))."""
    axis = attrs.get("axis")
    axes = tuple(range(4)) if axis is None else \
        tuple(a % 4 for a in ((axis,) if isinstance(axis, int) else axis))
    kept = [NHWC_AXIS[a] for a in range(4) if a not in axes]
    keepdims = bool(attrs.get("keepdims", False))
    if not keepdims and kept != sorted(kept):
        return None
    attrs["axis"] = tuple(sorted(NHWC_AXIS[a] for a in axes))
    out = g.op(node.op, x, name=node.name, **attrs)
    if keepdims:
        nhwc.add(id(out))
    return out
