"""Transformer patterns recognized by value before fusion (prepare() runs them), whatever
names or spelling the exporter chose:

- `scale_after_matmul`: scalar factors on a matmul's operands (attention's q and k scaled by
  d**-0.25 each, through the head-split transposes) move after it, where they are the
  matmul's epilogue:  bmm(T(a * s), T'(b * t)) -> bmm(T(a), T'(b)) * (s * t).
- `keys_transposed_once`: batch_matmul(q, k, transpose_b) of a computed k (attention as the
  torch importer lowers it) -> batch_matmul(q, transpose(k)): the matmul's vectors run
  along the keys, which k^T holds contiguously; read from k each would be a gather. The
  copy (k's head split included: one kernel) costs less than the gathers.
- `merge_sibling_matmuls`: matmuls of one input by constant weights (attention's q, k and
  v projections), with their bias adds, -> one matmul by the concatenated weights, whose
  slices the readers take (and fusion reads in place): one kernel for three, the input
  read once.
- `recognize_rms_norm`: x * 1/sqrt(mean(x * x) + eps) [* w] -> rms_norm(x, w, eps).
- `slices_before_transposes`: slices of a transposed tensor (ViT's q, k, v taken from a
  (3, L, ...) transpose of the fused projection) slice the source instead:
  slice(transpose(x, p), axis=a) -> transpose(slice(x, axis=p[a]), p), so that the copy
  disappears into the matmuls that read the slices.
- `unit_transposes_as_views`: a transpose that moves only axes of length 1 (ViT's
  (1, L, D) -> (L, 1, D)) keeps the bytes in order: a reshape, no copy; so does a chain of
  transposes and reshapes that undo each other (ViT's patches, NHWC -> NCHW -> (C, L) ->
  (L, C)), checked by value on the element indices, even with unary elementwise nodes
  between them (whisper's gelu between its convolution's NCHW and the tokens).
"""
from __future__ import annotations

import numpy as np

from .ir import Graph, GraphBuilder, Value
from .op import get_graph_op

_MOVES = ("transpose", "reshape", "slice")


def _rebuild(graph: Graph, replace, new_of: dict) -> Graph:
    """The graph rebuilt node by node: replace(node, new args, builder) gives a node's new
    output value, or None to copy the node; new_of (id(old value) -> new) fills as it goes."""
    g = GraphBuilder(graph.name)
    for v in graph.inputs:
        new_of[id(v)] = g.input(v.name, v.shape, v.dtype)

    for node in graph.nodes:
        args = [_new(new_of, v) for v in node.inputs]
        out = replace(node, args, g)
        new_of[id(node.output)] = out if out is not None else \
            g.op(node.op, *args, name=node.name, **node.attrs)
    from .simplify import remove_dead
    return remove_dead(g.finish(*[_new(new_of, v) for v in graph.outputs]))


def _new(new_of: dict, v: Value) -> Value:
    return v if v.is_const else new_of[id(v)]


def _scalar_factor(node) -> float | None:
    """s when node computes x * s for one tensor x and a number s (attribute or a constant
    of one element)."""
    if node.op != "mul":
        return None
    if "scalar" in node.attrs and len(node.inputs) == 1:
        return float(node.attrs["scalar"])
    if len(node.inputs) == 2 and not node.attrs:
        a, b = node.inputs
        c, x = (a, b) if a.is_const else (b, a)
        if c.is_const and not x.is_const and c.data.size == 1 and node.output.shape == x.shape:
            return float(c.data.reshape(()))
    return None


def scale_after_matmul(graph: Graph) -> Graph:
    readers = graph.consumers()
    outputs = {id(v) for v in graph.outputs}
    dropped: dict = {}   # id(mul node) -> its tensor input
    factor: dict = {}    # id(matmul node) -> the product of its operands' factors
    for node in graph.nodes:
        if node.op not in ("matmul", "batch_matmul"):
            continue
        s = 1.0
        for v in node.inputs:
            last = node
            while v.producer is not None and id(v) not in outputs \
                    and [id(r) for r in readers.get(id(v), [])] == [id(last)]:
                p = v.producer
                f = _scalar_factor(p)
                if f is not None:
                    s *= f
                    dropped[id(p)] = next(a for a in p.inputs if not a.is_const)
                elif p.op not in _MOVES:
                    break
                last, v = p, next(a for a in p.inputs if not a.is_const)
        if s != 1.0:
            factor[id(node)] = s
    if not dropped:
        return graph

    def replace(node, args, g):
        if id(node) in dropped:
            return next(a for a, v in zip(args, node.inputs) if not v.is_const)
        if id(node) in factor:
            y = g.op(node.op, *args, name=node.name, **node.attrs)
            return g.op("mul", y, name=node.name + "_scale", scalar=factor[id(node)])
        return None

    return _rebuild(graph, replace, {})


def keys_transposed_once(graph: Graph) -> Graph:
    def computed_b(node) -> bool:
        return node.op == "batch_matmul" and bool(node.attrs.get("transpose_b")) \
            and not node.inputs[1].is_const and len(node.inputs[1].shape) == 3

    if not any(computed_b(n) for n in graph.nodes):
        return graph

    def replace(node, args, g):
        if not computed_b(node):
            return None
        kt = g.op("transpose", args[1], name=node.name + "_kt", perm=(0, 2, 1))
        attrs = {k: v for k, v in node.attrs.items() if k != "transpose_b"}
        return g.op("batch_matmul", args[0], kt, name=node.name, **attrs)

    return _rebuild(graph, replace, {})


# ------------------------------------------------------------------ RMSNorm
def _through(v: Value, *ops):
    p = v.producer
    return p if p is not None and p.op in ops else None


def _rms_of(r: Value, x: Value):
    """eps when r = 1 / sqrt(mean(x * x, last axis, keepdims) + eps) (or rsqrt, or
    pow(., -0.5), or div(1, .)); None otherwise."""
    p = r.producer
    if p is None:
        return None
    if p.op == "reciprocal" or (p.op == "div" and p.attrs.get("reverse")
                                and p.attrs.get("scalar") == 1.0):
        q = _through(p.inputs[0], "sqrt")
    elif p.op == "rsqrt":
        q = p
    else:
        return None
    if q is None:
        return None
    add = _through(q.inputs[0], "add")
    if add is None or "scalar" not in add.attrs:
        return None
    mean = _through(add.inputs[0], "mean")
    if mean is None or not mean.attrs.get("keepdims"):
        return None
    axes = mean.attrs.get("axis")
    axes = (axes,) if isinstance(axes, int) else tuple(axes or ())
    if [a % len(x.shape) for a in axes] != [len(x.shape) - 1]:
        return None
    sq = mean.inputs[0].producer
    if sq is None or not ((sq.op == "mul" and len(sq.inputs) == 2 and sq.inputs[0] is x
                           and sq.inputs[1] is x)
                          or (sq.op == "pow" and sq.inputs[0] is x
                              and sq.attrs.get("scalar") == 2.0)):
        return None
    return float(add.attrs["scalar"])


def recognize_rms_norm(graph: Graph) -> Graph:
    readers = graph.consumers()
    outputs = {id(v) for v in graph.outputs}
    found: dict = {}   # id(final node) -> (x, gamma or None, eps)
    for node in graph.nodes:
        if node.op != "mul" or len(node.inputs) != 2 or node.attrs:
            continue
        for x, r in (node.inputs, node.inputs[::-1]):
            eps = None if x.is_const else _rms_of(r, x)
            if eps is None:
                continue
            end, gamma = node, None
            users = readers.get(id(node.output), [])
            if len(users) == 1 and id(node.output) not in outputs and users[0].op == "mul" \
                    and not users[0].attrs and len(users[0].inputs) == 2:
                w = next((a for a in users[0].inputs if a is not node.output), None)
                if w is not None and w.is_const and w.data.size == x.shape[-1] \
                        and users[0].output.shape == x.shape:
                    end, gamma = users[0], w
            found[id(end)] = (x, gamma, eps)
            break
    if not found:
        return graph
    new_of: dict = {}

    def replace(node, args, g):
        if id(node) not in found:
            return None
        x, gamma, eps = found[id(node)]
        ins = [_new(new_of, x)]
        if gamma is not None:
            ins.append(g.const(gamma.name + "_w", gamma.data.reshape(-1).astype(np.float32)))
        return g.op("rms_norm", *ins, name=node.name, eps=eps)

    return _rebuild(graph, replace, new_of)


def _unit_reshape_axis(src: tuple, dst: tuple, axis: int):
    """The axis of src that dst's `axis` is, when the reshape only adds or drops axes of
    length 1 and `axis` is not one of them; None otherwise."""
    big_s = [i for i, n in enumerate(src) if n != 1]
    big_d = [i for i, n in enumerate(dst) if n != 1]
    if [src[i] for i in big_s] != [dst[i] for i in big_d] or axis not in big_d:
        return None
    return big_s[big_d.index(axis)]


def slices_before_transposes(graph: Graph) -> Graph:
    readers = graph.consumers()
    outputs = {id(v) for v in graph.outputs}
    plan: dict = {}   # id(slice node) -> (transpose node, reshape node or None, source axis)
    for t in graph.nodes:
        if t.op != "transpose" or id(t.output) in outputs:
            continue
        users = readers.get(id(t.output), [])
        found = {}
        for u in users:
            r, ends = None, [u]
            if u.op == "reshape" and id(u.output) not in outputs:
                r, ends = u, readers.get(id(u.output), [])
            for s in ends:
                if s.op != "slice":
                    break
                axis = s.attrs["axis"] % len(s.inputs[0].shape)
                if r is not None:
                    axis = _unit_reshape_axis(t.output.shape, r.output.shape, axis)
                if axis is None:
                    break
                found[id(s)] = (t, r, t.attrs["perm"][axis])
            else:
                continue
            break
        else:
            if found:
                plan.update(found)
    if not plan:
        return graph

    def replace(node, args, g):
        if id(node) not in plan:
            return None
        t, r, axis = plan[id(node)]
        x = _new(new_of, t.inputs[0])
        attrs = dict(node.attrs, axis=axis)
        y = g.op("transpose", g.op("slice", x, name=node.name + "_src", **attrs),
                 name=node.name + "_t", perm=t.attrs["perm"])
        return y if y.shape == node.output.shape else \
            g.op("reshape", y, name=node.name, shape=node.output.shape)

    new_of: dict = {}
    return _rebuild(graph, replace, new_of)


def _unary(node) -> bool:
    """An elementwise node of one tensor and numbers (gelu, x * 0.5): it commutes with moves."""
    tensors = [a for a in node.inputs if not a.is_const]
    return get_graph_op(node.op).kind == "elementwise" and len(tensors) == 1 \
        and tensors[0].shape == node.output.shape \
        and all(a.data.size == 1 for a in node.inputs if a.is_const)


def _moves_keep_order(node, readers):
    """(source, unary nodes top down) when a transpose ends a chain of transposes, reshapes
    and unary elementwise nodes (each read by the next alone) that leaves the source's bytes
    in order (whisper's NHWC -> NCHW, gelu, -> (L, C)); None when it moves any."""
    chain, v = [node], node.inputs[0]
    while v.producer is not None and len(readers.get(id(v), [])) == 1 \
            and (v.producer.op in ("transpose", "reshape") or _unary(v.producer)):
        chain.append(v.producer)
        v = next(a for a in v.producer.inputs if not a.is_const)
    while len(chain) > 1 and chain[-1].op != "transpose":
        v = chain.pop().output  # nothing moves above the first transpose
    x = np.arange(v.type.size, dtype=np.int64).reshape(v.shape)
    for n in reversed(chain):
        if n.op in ("transpose", "reshape"):
            x = get_graph_op(n.op).ref([x], n.attrs)
    if not np.array_equal(x.reshape(-1), np.arange(x.size)):
        return None
    return v, [n for n in reversed(chain) if n.op not in ("transpose", "reshape")]


def unit_transposes_as_views(graph: Graph) -> Graph:
    readers = graph.consumers()
    found = {id(n): f for n in graph.nodes if n.op == "transpose"
             and (f := _moves_keep_order(n, readers)) is not None}
    if not found:
        return graph
    new_of: dict = {}

    def replace(node, args, g):
        if id(node) not in found:
            return None
        src, unary = found[id(node)]
        y = _new(new_of, src)
        for u in unary:  # applied to the source in its own layout
            y = g.op(u.op, *[a if a.is_const else y for a in u.inputs], name=u.name + "_src",
                     **u.attrs)
        return g.op("reshape", y, name=node.name, shape=node.output.shape)

    return _rebuild(graph, replace, new_of)


def _view_source(v: Value) -> Value:
    while v.producer is not None and v.producer.op == "reshape":
        v = v.producer.inputs[0]
    return v


def merge_sibling_matmuls(graph: Graph) -> Graph:
    readers = graph.consumers()
    outputs = {id(v) for v in graph.outputs}
    siblings: dict = {}  # (id(source of A), A's shape, attrs) -> [matmul node]
    for n in graph.nodes:
        if n.op == "matmul" and not n.attrs and n.inputs[1].is_const \
                and len(n.inputs[1].shape) == 2 and not n.inputs[0].is_const:
            key = (id(_view_source(n.inputs[0])), n.inputs[0].shape)
            siblings.setdefault(key, []).append(n)
    groups = [ms for ms in siblings.values() if len(ms) > 1]
    if not groups:
        return graph

    def bias_of(m):
        """(add node, its bias as (N,)) when m's only reader adds a constant per column."""
        users = readers.get(id(m.output), [])
        if len(users) != 1 or id(m.output) in outputs or users[0].op != "add" \
                or users[0].attrs or len(users[0].inputs) != 2:
            return None
        add = users[0]
        c = next((a for a in add.inputs if a is not m.output), None)
        n = m.output.shape[-1]
        if c is None or not c.is_const or c.shape[-1:] != (n,) \
                or add.output.shape != m.output.shape:
            return None
        rows = c.data.reshape(-1, n)  # (sink_views may have broadcast it to every row)
        return (add, rows[0]) if np.all(rows == rows[:1]) else None

    first: dict = {}   # id(first matmul) -> its group
    slice_of: dict = {}  # id(node) -> (group, member index): its output is that slice
    for ms in groups:
        first[id(ms[0])] = ms
        for i, m in enumerate(ms):
            b = bias_of(m)
            slice_of[id(m)] = (ms, i)  # (under a bias add: read by nothing once it is merged)
            if b:
                slice_of[id(b[0])] = (ms, i)
    made: dict = {}  # id(group's first) -> [slice values]
    new_of: dict = {}

    def replace(node, args, g):
        if id(node) in first:
            ms = first[id(node)]
            w = np.concatenate([m.inputs[1].data for m in ms], axis=1)
            y = g.op("matmul", args[0], g.const(node.name + "_w", w), name=node.name + "_merged")
            biases = [bias_of(m) for m in ms]
            if any(biases):
                b = np.concatenate([bb[1] if bb else np.zeros(m.output.shape[-1], "float32")
                                    for bb, m in zip(biases, ms)])
                y = g.op("add", y, g.const(node.name + "_b", b.astype(np.float32)),
                         name=node.name + "_bias")
            cuts = np.cumsum([0] + [m.output.shape[-1] for m in ms])
            made[id(ms[0])] = [g.op("slice", y, name=m.name + "_part", axis=1,
                                    start=int(a), stop=int(b)) for m, a, b in
                               zip(ms, cuts[:-1], cuts[1:])]
        if id(node) in slice_of:
            ms, i = slice_of[id(node)]
            return made[id(ms[0])][i]
        return None

    return _rebuild(graph, replace, new_of)


def rewrite_patterns(graph: Graph) -> Graph:
    """Every pattern of this module, in order."""
    graph = recognize_rms_norm(graph)
    return scale_after_matmul(keys_transposed_once(graph))
