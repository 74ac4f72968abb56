"""Graph rewrites done once, before fusion.

`fold_conv_affine`: a per-channel scale right after a convolution (an inference batch norm,
imported as `mul` then `add` by a per-channel constant) moves into the convolution's weights,
and the additions of constants that follow collapse into one bias add:

    conv2d(x, W) [+ b] * s + t   ->   conv2d(x, W * s) + (b * s + t)
"""
from __future__ import annotations

import math

import numpy as np

from .evaluate import fold_constants
from .ir import Graph, GraphBuilder, Value


def _per_channel(v: Value, k: int) -> bool:
    """A constant of shape (1, k, 1, ...) or (k, 1, ...): one value per output channel."""
    if not v.is_const:
        return False
    s = v.shape
    return len(s) >= 1 and int(np.prod(s)) == k and (s[:2] == (1, k) or s[:1] == (k,)) \
        and len(s) >= 3


def _const_operand(node, k: int):
    if node.op in ("add", "mul") and len(node.inputs) == 2 and not node.attrs:
        a, b = node.inputs
        if _per_channel(b, k) and not a.is_const:
            return a, b
        if _per_channel(a, k) and not b.is_const:
            return b, a
    return None


def fold_conv_affine(graph: Graph) -> Graph:
    graph = fold_constants(graph)
    readers = graph.consumers()
    outputs = {id(v) for v in graph.outputs}

    def single(v):
        return len(readers.get(id(v), [])) == 1 and id(v) not in outputs

    scale_of: dict = {}   # id(conv node) -> per-channel scale
    bias_scale: dict = {}  # id(add node) -> per-channel scale
    dropped: set = set()   # id(mul node) folded away
    for node in graph.nodes:
        if node.op != "mul":
            continue
        if not node.inputs or node.inputs[0].producer is None:
            continue
        x = next((v for v in node.inputs if not v.is_const), None)
        p = x.producer if x is not None else None
        k = x.shape[1] if x is not None and len(x.shape) == 4 else None
        if k is None or _const_operand(node, k) is None or not single(x):
            continue
        scale = _const_operand(node, k)[1].data.reshape(k)
        bias = None
        if p.op == "add" and _const_operand(p, k) is not None:
            y = _const_operand(p, k)[0]
            if y.producer is None or not single(y):
                continue
            bias, p = p, y.producer
        if p.op != "conv2d" or not p.inputs[1].is_const or id(p) in scale_of:
            continue
        scale_of[id(p)] = scale
        if bias is not None:
            bias_scale[id(bias)] = scale
        dropped.add(id(node))

    g = GraphBuilder(graph.name)
    vmap: dict = {id(v): g.input(v.name, v.shape, v.dtype) for v in graph.inputs}
    made_by: dict = {}  # id(new value) -> (op, input, const) of the add that made it

    def get(v):
        return v if v.is_const else vmap[id(v)]

    for node in graph.nodes:
        args = [get(v) for v in node.inputs]
        if id(node) in dropped:
            vmap[id(node.output)] = next(a for a in args if not a.is_const)
            continue
        if id(node) in scale_of:
            s = scale_of[id(node)].astype(np.float32)
            w = node.inputs[1].data * s.reshape((-1,) + (1,) * (node.inputs[1].data.ndim - 1))
            args[1] = g.const(node.inputs[1].name + "_folded", w.astype(np.float32))
        elif id(node) in bias_scale:
            k = node.output.shape[1]
            y, c = _const_operand(node, k)
            per_channel = c.shape if c.shape[:1] != (k,) else (k,) + (1,) * (len(c.shape) - 1)
            s = bias_scale[id(node)].reshape(per_channel)
            args = [get(y), g.const(c.name + "_folded", (c.data * s).astype(np.float32))]
        out = g.op(node.op, *args, name=node.name, **node.attrs)
        # (v + c1) + c2 -> v + (c1 + c2)
        if node.op == "add" and len(args) == 2 and args[1].is_const and not node.attrs:
            prev = made_by.get(id(args[0]))
            if prev is not None and prev[2].shape == args[1].shape and single(node.inputs[0]):
                g.nodes.pop()  # drop the add just made, and the one before (now unread)
                g.nodes.remove(args[0].producer)
                merged = g.const(node.name + "_bias", (prev[2].data + args[1].data)
                                 .astype(np.float32))
                out = g.op("add", prev[1], merged, name=node.name)
            made_by[id(out)] = ("add", out.producer.inputs[0], out.producer.inputs[1])
        vmap[id(node.output)] = out
    return g.finish(*[get(v) for v in graph.outputs])


def _channels_last_groups(node) -> bool:
    """Whether a convolution computes channels-last: groups 1, or depthwise (one input
    channel per group), whose output channel k reads input channel k // multiplier. Other
    grouped convolutions stay NCHW: vectorized over output channels, their input reads
    would be gathers."""
    groups = int(node.attrs.get("groups", 1))
    return groups == 1 or node.inputs[1].shape[1] == 1


_PROBE = np.linspace(-6, 6, 97)
# y = act(x) as exporters spell it in elementwise nodes (checked by value, whatever the
# spelling): activation name, attributes, y as a function of x
_ACTIVATIONS = (
    ("silu", {}, lambda t: t / (1 + np.exp(-t))),
    ("gelu", {}, lambda t: 0.5 * t * (1 + np.vectorize(math.erf)(t / math.sqrt(2)))),
    ("gelu", {"approximate": "tanh"},
     lambda t: 0.5 * t * (1 + np.tanh(math.sqrt(2 / math.pi) * (t + 0.044715 * t ** 3)))),
)
_CONE = 12  # nodes an activation may be spelled with


def _cone(y, x, readers, outputs):
    """The elementwise nodes that make y from x alone, in graph order: every tensor they read
    is x or made among them (constants are scalars), and nothing else reads what they make
    (y aside). None where y is not such a function of x."""
    from .op import get_graph_op
    nodes, seen, stack = {}, set(), [y]
    while stack:
        v = stack.pop()
        if v is x or id(v) in seen:
            continue
        p = v.producer
        if p is None or len(nodes) >= _CONE or get_graph_op(p.op).kind != "elementwise" \
                or any(a.is_const and a.data.size != 1 for a in p.inputs):
            return None
        seen.add(id(v))
        nodes[id(p)] = p
        stack.extend(a for a in p.inputs if not a.is_const)
    for n in nodes.values():
        if n.output is not y and (id(n.output) in outputs or any(
                id(r) not in nodes for r in readers.get(id(n.output), []))):
            return None
    return list(nodes.values())


def _activation_of(y, readers, outputs, order):
    """(activation, attributes, x) when y = act(x) for a value x that y's elementwise nodes
    read at least twice (x * sigmoid(x), x * 0.5 * (1 + erf(x / sqrt(2))), ...), else None."""
    region, stack = [], [y]
    while stack and len(region) < _CONE:  # the values upstream of y: candidates for x
        v = stack.pop()
        p = v.producer
        if p is None:
            continue
        for a in p.inputs:
            if not a.is_const and a not in region:
                region.append(a)
                stack.append(a)
    from .op import get_graph_op
    for x in region:
        if len(readers.get(id(x), [])) < 2:
            continue
        nodes = _cone(y, x, readers, outputs)
        if not nodes or len(nodes) < 2:
            continue
        env = {id(x): _PROBE.astype(np.float32)}
        for n in sorted(nodes, key=lambda n: order[id(n)]):
            arrays = [a.data.reshape(()) if a.is_const else env[id(a)] for a in n.inputs]
            with np.errstate(all="ignore"):
                env[id(n.output)] = np.asarray(get_graph_op(n.op).ref(arrays, n.attrs),
                                               dtype=np.float32)
        for name, attrs, f in _ACTIVATIONS:
            if np.allclose(env[id(y)], f(_PROBE), rtol=1e-5, atol=1e-5):
                return name, attrs, x
    return None


def fuse_activations(graph: Graph) -> Graph:
    """x * sigmoid(x) -> silu(x); x * 0.5 * (1 + erf(x / sqrt(2))) and its tanh form (GPT-2's,
    with pow(x, 3)) -> gelu(x), however exporters spell them: x is read twice, so no node of
    the pattern would fuse into the convolution or matmul that makes x, and pow is a libm
    call per element; one activation fuses as its epilogue."""
    readers = graph.consumers()
    outputs = {id(v) for v in graph.outputs}
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    from .op import get_graph_op
    act: dict = {}  # id(node making y) -> (activation, attributes, x)
    for node in graph.nodes:
        if get_graph_op(node.op).kind == "elementwise" and len(node.inputs) <= 2:
            found = _activation_of(node.output, readers, outputs, order)
            if found is not None:
                act[id(node)] = found
    if not act:
        return graph
    g = GraphBuilder(graph.name)
    vmap: dict = {id(v): g.input(v.name, v.shape, v.dtype) for v in graph.inputs}

    def get(v):
        return v if v.is_const else vmap[id(v)]

    for node in graph.nodes:
        if id(node) in act:
            name, attrs, x = act[id(node)]
            vmap[id(node.output)] = g.op(name, get(x), name=node.name, **attrs)
        else:  # the pattern's other nodes too: remove_dead drops them
            vmap[id(node.output)] = g.op(node.op, *[get(v) for v in node.inputs],
                                         name=node.name, **node.attrs)
    return remove_dead(g.finish(*[get(v) for v in graph.outputs]))


def constant_weight_layouts(graph: Graph) -> Graph:
    """Constant weights in the layouts kernels read best, transposed once at compile time:
    a matmul that reads its weight transposed (a linear layer's (N, K)) reads it as (K, N);
    a convolution (groups 1, or depthwise) reads its weight as (C/groups, R, S, K) and
    computes channels-last (conv2d's weight_layout="CRSK"), so that its kernel vectorizes
    over output channels whatever the image's width or stride: ResNet-18's default build
    went from 68 to 32 ms. An 8-bit weight goes (R, S, K, C) ("RSKC"): its input channels
    are the reduction the int8 units sum in groups of 4."""
    g = GraphBuilder(graph.name)
    vmap: dict = {id(v): g.input(v.name, v.shape, v.dtype) for v in graph.inputs}

    def get(v):
        return v if v.is_const else vmap[id(v)]

    for node in graph.nodes:
        args = [get(v) for v in node.inputs]
        attrs = dict(node.attrs)
        if node.op in ("matmul", "batch_matmul") and attrs.get("transpose_b") and args[1].is_const \
                and args[1].dtype == "float32":  # a low-precision weight: [N][K], as units read it
            w = args[1].data
            w = w.T if w.ndim == 2 else np.swapaxes(w, -1, -2)
            args[1] = g.const(args[1].name + "_t", np.ascontiguousarray(w))
            attrs.pop("transpose_b")
        if node.op == "conv2d" and args[1].is_const and _channels_last_groups(node) \
                and attrs.get("weight_layout", "KCRS") == "KCRS":
            # 8-bit weights of a full convolution: input channels innermost (RSKC), the
            # reduction groups an int8 unit reads; else output channels innermost (CRSK)
            rskc = args[1].dtype in ("int8", "uint8") and args[1].shape[1] > 1
            w = np.ascontiguousarray(np.transpose(args[1].data,
                                                  (2, 3, 0, 1) if rskc else (1, 2, 3, 0)))
            attrs["weight_layout"] = "RSKC" if rskc else "CRSK"
            args[1] = g.const(args[1].name + "_" + attrs["weight_layout"].lower(), w)
        vmap[id(node.output)] = g.op(node.op, *args, name=node.name, **attrs)
    return g.finish(*[get(v) for v in graph.outputs])


def merge_transposes(graph: Graph) -> Graph:
    """transpose(transpose(x, p1), p2) -> transpose(x, p1[p2]) when the inner one has no other
    reader (k.transpose(1, 2).transpose(-1, -2) in attention): one copy instead of two."""
    readers = graph.consumers()
    outputs = {id(v) for v in graph.outputs}
    g = GraphBuilder(graph.name)
    vmap: dict = {id(v): g.input(v.name, v.shape, v.dtype) for v in graph.inputs}
    made: dict = {}  # id(old node) -> the node made for it (None: none)
    # id(old transpose) -> (new input, perm) after merging: a chain of three merges into one
    merged: dict = {}

    def get(v):
        return v if v.is_const else vmap[id(v)]

    for node in graph.nodes:
        args = [get(v) for v in node.inputs]
        attrs = dict(node.attrs)
        inner = node.inputs[0].producer if node.inputs else None
        if node.op == "transpose" and inner is not None and inner.op == "transpose" \
                and len(readers.get(id(inner.output), [])) == 1 \
                and id(inner.output) not in outputs:
            src, p1 = merged[id(inner)]
            attrs["perm"] = tuple(p1[d] for d in attrs["perm"])
            args = [src]
            if made.get(id(inner)) is not None:
                g.nodes.remove(made[id(inner)])  # its only reader now skips it
        if node.op == "transpose":
            merged[id(node)] = (args[0], tuple(attrs["perm"]))
        if node.op == "transpose" and tuple(attrs["perm"]) == tuple(range(len(attrs["perm"]))):
            vmap[id(node.output)] = args[0]
            made[id(node)] = None
            continue
        vmap[id(node.output)] = g.op(node.op, *args, name=node.name, **attrs)
        made[id(node)] = vmap[id(node.output)].producer
    return g.finish(*[get(v) for v in graph.outputs])


def sink_views(graph: Graph) -> Graph:
    """Reshapes move below the elementwise operators that read them, so that those fuse
    with the kernel before the reshape (a linear layer's bias, GELU and residual add on
    (batch, tokens, features) tensors computed as (batch * tokens, features)):

        add(reshape(matmul(a, w), s), r)  ->  reshape(add(matmul(a, w), reshape(r, s0)), s)

    when every other tensor input has the full output shape (its reshape is free) or is a
    constant (broadcast and reshaped at compile time). Reshapes of reshapes collapse."""
    from .op import get_graph_op
    g = GraphBuilder(graph.name)
    vmap: dict = {id(v): g.input(v.name, v.shape, v.dtype) for v in graph.inputs}

    def get(v):
        return v if v.is_const else vmap[id(v)]

    def base(v):
        p = v.producer
        return p.inputs[0] if p is not None and p.op == "reshape" else None

    readers = graph.consumers()

    def uses(v):
        """The nodes other than reshapes that read v's bytes (through any views)."""
        while v.producer is not None and v.producer.op == "reshape":
            v = v.producer.inputs[0]
        stack, n = [v], 0
        while stack:
            for r in readers.get(id(stack.pop()), []):
                if r.op == "reshape":
                    stack.append(r.output)
                else:
                    n += 1
        return n

    for node in graph.nodes:
        args = [get(v) for v in node.inputs]
        if node.op == "reshape":
            src = base(args[0]) or args[0]
            vmap[id(node.output)] = src if src.shape == node.output.shape else \
                g.op("reshape", src, name=node.name, shape=node.output.shape)
            continue
        kind = get_graph_op(node.op).kind
        viewed = [base(a) for a in args]
        # a reshaped kernel output (not a reshaped graph input: nothing would fuse) with as
        # many elements as the output (a reshaped value that broadcasts stays put); first
        # one this node alone reads (its kernel can take this node as its epilogue)
        kernels = [(b, v) for b, v in zip(viewed, node.inputs)
                   if b is not None and b.producer is not None
                   and b.type.size == node.output.type.size]
        pick = next((b for b, v in kernels if uses(v) == 1), kernels[0][0] if kernels else None)
        if kind == "elementwise" and pick is not None:
            shape, inner = node.output.shape, pick.shape
            new_args = []
            for a, b in zip(args, viewed):
                if b is not None and b.shape == inner:
                    new_args.append(b)
                elif a.is_const:
                    full = np.broadcast_to(a.data, shape)
                    new_args.append(g.const(a.name + "_b", np.ascontiguousarray(full)
                                            .reshape(inner)))
                elif a.shape == shape:
                    new_args.append(g.op("reshape", a, name=a.name + "_v", shape=inner))
                else:
                    new_args = None
                    break
            if new_args is not None and all(x.shape == inner or x.is_const for x in new_args):
                y = g.op(node.op, *new_args, name=node.name, **node.attrs)
                vmap[id(node.output)] = g.op("reshape", y, name=node.name + "_view",
                                             shape=shape)
                continue
        vmap[id(node.output)] = g.op(node.op, *args, name=node.name, **node.attrs)
    return g.finish(*[get(v) for v in graph.outputs])


def lower_attention(graph: Graph) -> Graph:
    """attention -> the kernels that compute it well: for q (..., Lq, D) with b = the product
    of the leading dims,

        s = batch_matmul(q as (b, Lq, D), k as (b, Lk, D), transpose_b) * scale  [+ causal]
        out = batch_matmul(softmax(s [+ mask], axis=-1), v as (b, Lk, Dv)) as (..., Lq, Dv)

    The scale and a causal mask (a constant (Lq, Lk)) are the first matmul's epilogue; a mask
    with leading dims of 1 is added to (b, Lq, Lk) too, another (a padding mask per batch)
    to the scores viewed as (..., Lq, Lk). The reshapes are views: no copies."""
    if not any(n.op == "attention" for n in graph.nodes):
        return graph
    from .op.attention import causal_mask, scale_of, shapes
    g = GraphBuilder(graph.name)
    vmap: dict = {id(v): g.input(v.name, v.shape, v.dtype) for v in graph.inputs}

    def get(v):
        return v if v.is_const else vmap[id(v)]

    for node in graph.nodes:
        args = [get(v) for v in node.inputs]
        if node.op != "attention":
            vmap[id(node.output)] = g.op(node.op, *args, name=node.name, **node.attrs)
            continue
        batch, lq, lk, d, dv = shapes(node.name, node.inputs)
        b, name = int(np.prod(batch, dtype=np.int64)), node.name

        def view(v, shape, what):
            return v if v.shape == shape else g.op("reshape", v, name=f"{name}_{what}",
                                                   shape=shape)

        q, k, v = (view(x, (b,) + x.shape[-2:], w) for x, w in zip(args[:3], "qkv"))
        s = g.op("batch_matmul", q, k, name=name + "_qk", transpose_b=True)
        scale = scale_of(node.attrs, d)
        if scale != 1.0:
            s = g.op("mul", s, name=name + "_scale", scalar=scale)
        if node.attrs.get("causal"):
            s = g.op("add", s, g.const(name + "_causal_mask", causal_mask(lq, lk)),
                     name=name + "_causal")
        mask = args[3] if len(args) > 3 else None
        if mask is not None:
            lead = mask.shape[:-2] if len(mask.shape) > 2 else ()
            if all(x == 1 for x in lead):  # one mask for every batch and head
                m2 = mask.shape[-2:] if len(mask.shape) >= 2 else mask.shape
                s = g.op("add", s, view(mask, m2, "mask2d"), name=name + "_mask")
            else:
                s = g.op("add", view(s, batch + (lq, lk), "scores"), mask, name=name + "_mask")
        p = view(g.op("softmax", s, name=name + "_softmax", axis=-1), (b, lq, lk), "probs")
        out = g.op("batch_matmul", p, v, name=name + "_pv")
        vmap[id(node.output)] = view(out, batch + (lq, dv), "out")
    return g.finish(*[get(v) for v in graph.outputs])


def remove_dead(graph: Graph) -> Graph:
    """The graph without the nodes no output depends on."""
    live = {id(v) for v in graph.outputs}
    keep = []
    for node in reversed(graph.nodes):
        if id(node.output) in live:
            keep.append(node)
            live.update(id(v) for v in node.inputs)
    if len(keep) == len(graph.nodes):
        return graph
    return Graph(graph.name, graph.inputs, list(reversed(keep)), graph.outputs)


def prepare(graph: Graph) -> Graph:
    """What every compiled graph goes through before fusion (tuning and compiling alike, so
    that their tasks are the same): constants folded, batch norms in the convolutions,
    x * sigmoid(x) as silu (and GELU), transformer patterns (patterns.py: gelu, rms_norm,
    scales after matmuls), weights in the layouts kernels read best, convolutional
    activations channels-last, consecutive transposes merged, slices before transposes,
    transposes of unit axes as views, reshapes moved below elementwise operators, sibling
    matmuls (q, k, v) as one, quantized matmuls on 8-bit operands (quantized.py)."""
    if getattr(graph, "prepared", False):
        return graph  # once: tuning and compiling must see the same kernels
    graph = lower_attention(graph)  # attention: batch matmuls around a softmax
    from .quantized import int8_products
    graph = int8_products(graph)  # quantized matmuls and convolutions on the int8 units
    from .layout import channels_last
    from .patterns import (merge_sibling_matmuls, rewrite_patterns, slices_before_transposes,
                           unit_transposes_as_views)
    graph = rewrite_patterns(fuse_activations(fold_conv_affine(graph)))
    graph = merge_transposes(channels_last(constant_weight_layouts(graph)))
    graph = unit_transposes_as_views(slices_before_transposes(graph))
    graph = remove_dead(merge_sibling_matmuls(remove_dead(sink_views(graph))))
    graph.prepared = True
    return graph
