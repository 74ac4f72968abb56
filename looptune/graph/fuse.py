"""Fusion: cut a graph into groups of nodes that become one kernel each.

- An elementwise node joins the group that produced one of its inputs, when that group's
  output is read by this node alone (and is not a graph output) and has the node's shape:
  bias adds, activations and residual adds become the epilogue of the matmul or convolution
  they follow. A broadcasting one (squeeze-excite's scale of an image by a (1, 1, 1, C)
  gate) does not: the group's kernel would compute each of its elements once per pixel.
- A reduction (softmax, layer_norm, mean) absorbs the group of elementwise nodes that feeds
  it, when it is that group's only reader: its prologue.
- A matmul or batch_matmul absorbs the transposes, slices and views that alone feed its
  operands (attention's head split, a fused qkv projection's split): its kernel reads the
  operand through them (dlight inlines them into the matmul's loads) instead of a copy;
  its A operand, loaded one scalar at a time, also through a group of elementwise nodes of
  one tensor (where(isnan(p), 0, p) after a softmax: a kernel of its own otherwise, and in
  the softmax's kernel it would recompute the softmax three times, unvectorized).
  Not a B operand whose rows would not be contiguous (k^T of keys stored (L, D)): the
  copy, vectorizable, is cheaper than gathering every vector. Consecutive copies (a
  transpose of a reshaped transpose) become one copy kernel the same way.
- Anchors (matmul, conv2d, pooling) and injective nodes (transpose, slice, concat) start a
  group of their own otherwise. Views (reshape) make no kernel: the executor passes the same
  bytes on.

Each group becomes a PrimFunc named by the operators it holds (`fused_matmul_add_relu`),
with the group's external inputs as parameters in order of first use: weights are
parameters, not baked in, so identical layers make identical functions.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import te
from ..tir.func import PrimFunc
from .ir import Graph, Value
from .op import get_graph_op

_EPILOGUE_HOSTS = ("anchor", "reduction", "elementwise", "injective")
_PROLOGUE_ANCHORS = ("matmul", "batch_matmul")
_OPERAND_MOVES = ("transpose", "slice", "reshape")
# elementwise nodes cheap enough to recompute at each load of a matmul's A operand
_CHEAP = ("isnan", "where", "add", "sub", "mul", "relu")


@dataclass
class FusedGroup:
    """Nodes that become one kernel, in order; the last one's output is the group's."""

    nodes: list = field(default_factory=list)
    kinds: set = field(default_factory=set)

    @property
    def output(self) -> Value:
        return self.nodes[-1].output

    @property
    def name(self) -> str:
        return "fused_" + "_".join(n.op for n in self.nodes)

    @property
    def inputs(self) -> list:
        """External inputs in order of first use (graph inputs, constants, other groups')."""
        inside = {id(n.output) for n in self.nodes}
        out, seen = [], set()
        for n in self.nodes:
            for v in n.inputs:
                if id(v) not in inside and id(v) not in seen:
                    seen.add(id(v))
                    out.append(v)
        return out

    def prim_func(self):
        """The group as one PrimFunc: (inputs..., output)."""
        env, params = {}, []
        for i, v in enumerate(self.inputs):
            t = te.placeholder(v.shape, name=f"p{i}", dtype=v.dtype)
            env[id(v)] = t
            params.append(t)
        for n in self.nodes:
            env[id(n.output)] = get_graph_op(n.op).te([env[id(v)] for v in n.inputs], n.attrs,
                                                      n.op)
        func = te.create_prim_func(params + [env[id(self.output)]], name=self.name)
        consts = tuple(i for i, v in enumerate(self.inputs) if v.is_const)
        if not consts:
            return func
        # constants may change layout at compile time (postproc RewriteLayout)
        return PrimFunc(func.name, func.params, func.body,
                        func.attrs + (("layout_free_params", consts),))


def _rows_contiguous(chain: list) -> bool:
    """Whether the value the chain of moves makes is contiguous along its last axis in the
    chain's source: a matmul's B read through the chain still loads vectors of its rows."""
    src = chain[0].inputs[0]
    x = np.arange(src.type.size, dtype=np.int64).reshape(src.shape)
    for n in chain:
        x = get_graph_op(n.op).ref([x], n.attrs)
    return x.shape[-1] == 1 or bool(np.all(np.diff(x, axis=-1) == 1))


def fuse(graph: Graph) -> list:
    """The kernels of the graph, in an order that respects their dependencies."""
    consumers = graph.consumers()
    outputs = {id(v) for v in graph.outputs}
    group_of: dict = {}   # id(node output) -> FusedGroup
    order = {n: i for i, n in enumerate(graph.nodes)}
    groups: list = []

    def sole_reader(v: Value, node) -> bool:
        readers = consumers.get(id(v), [])
        return len(readers) == 1 and readers[0] is node and id(v) not in outputs

    def operand_chain(v: Value, node, *, pointwise: bool):
        """The groups and views that feed v only to `node`: transposes, slices and views
        back to another kernel's output (and with `pointwise`, groups of elementwise nodes
        of one tensor: the NaN guard after a softmax); None when v is not such a chain's
        end."""
        path = []  # from node upwards

        def read_inside(x: Value) -> bool:
            inside = set(map(id, path)) | {id(node)}
            return id(x) not in outputs and bool(consumers.get(id(x))) \
                and all(id(r) in inside for r in consumers[id(x)])

        while v.producer is not None and read_inside(v):
            g = group_of.get(id(v))
            if g is None:  # a view
                if v.producer.op != "reshape":
                    break
                path.append(v.producer)
                v = v.producer.inputs[0]
                continue
            tensors = [x for x in g.inputs if not x.is_const]
            moves = all(n.op in _OPERAND_MOVES for n in g.nodes)
            cheap = pointwise and all(n.op in _CHEAP and n.output.shape == g.output.shape
                                      for n in g.nodes)
            inner = {id(n) for n in g.nodes} | set(map(id, path)) | {id(node)}
            if g.output is not v or len(tensors) != 1 or not (moves or cheap) \
                    or any(id(n.output) in outputs or any(id(r) not in inner for r in
                                                          consumers.get(id(n.output), []))
                           for n in g.nodes[:-1]):
                break
            path.extend(reversed(g.nodes))
            v = tensors[0]
        found = path[::-1]
        while found and id(found[0].output) not in group_of:
            found.pop(0)  # views above the first copy: the kernel reads their source
        return found or None

    for node in graph.nodes:
        kind = get_graph_op(node.op).kind
        if kind == "view":
            continue
        target = None
        if kind == "elementwise":
            for v in node.inputs:
                g = group_of.get(id(v))
                if g is not None and g.output is v and g.kinds & set(_EPILOGUE_HOSTS) \
                        and node.output.shape == v.shape and sole_reader(v, node):
                    target = g
                    break
        elif kind == "reduction":
            for v in node.inputs:
                g = group_of.get(id(v))
                if g is not None and g.output is v and sole_reader(v, node) \
                        and g.kinds == {"elementwise"}:
                    target = g  # the elementwise producer becomes this reduction's prologue
                    break
        elif node.op in _PROLOGUE_ANCHORS or node.op in _OPERAND_MOVES:
            prologue = []
            for i, v in enumerate(node.inputs):
                chain = operand_chain(v, node, pointwise=i == 0 and node.op in _PROLOGUE_ANCHORS) \
                    or []
                if chain and i == 1 and node.op in _PROLOGUE_ANCHORS \
                        and not _rows_contiguous(chain):
                    chain = []  # B's rows would be gathers (k^T): the copy stays
                prologue += chain
            if prologue:
                absorbed = {id(group_of[id(n.output)]) for n in prologue
                            if id(n.output) in group_of}
                for g in [g for g in groups if id(g) in absorbed]:
                    groups.remove(g)
                target = FusedGroup(sorted(prologue, key=order.__getitem__), {"injective"})
                groups.append(target)
                for n in prologue:
                    group_of[id(n.output)] = target
        if target is None:
            target = FusedGroup()
            groups.append(target)
        else:
            groups.remove(target)   # it now ends here: keep groups ordered by their last node
            groups.append(target)
        target.nodes.append(node)
        target.kinds.add(kind)
        group_of[id(node.output)] = target
    return groups
