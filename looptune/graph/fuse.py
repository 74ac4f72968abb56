"""Fusion: cut a graph into groups of nodes that become one kernel each.

- An elementwise node joins the group that produced one of its inputs, when that group's
  output is read by this node alone (and is not a graph output) and has the node's shape:
  bias adds, activations and residual adds become the epilogue of the matmul or convolution
  they follow. A broadcasting one (squeeze-excite's scale of an image by a (1, 1, 1, C)
  gate) does not: the group's kernel would compute each of its elements once per pixel.
- A reduction (softmax, layer_norm, mean) absorbs the group of elementwise nodes that feeds
  it, when it is that group's only reader: its prologue.
- An elementwise node that closes a diamond joins too: where(isnan(p), 0, p) after a
  softmax reads p twice, but every reader of p is in the group or this node.
- A matmul or batch_matmul absorbs the transposes, slices and views that alone feed its
  operands (attention's head split, a fused qkv projection's split): its kernel reads the
  operand through them (dlight inlines them into the matmul's loads) instead of a copy.
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


@dataclass
class FusedGroup:
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

    def opens_diamond(v: Value, node) -> bool:
        """v's other readers are elementwise nodes of v and node's output alone, which join
        the group right after node (where(isnan(p), 0, p)): p is not needed outside it."""
        others = [r for r in consumers.get(id(v), []) if r is not node]
        if id(v) in outputs or len(others) != 1:
            return False
        r = others[0]
        return get_graph_op(r.op).kind == "elementwise" and r.output.shape == v.shape \
            and sole_reader(node.output, r) \
            and all(a.is_const or a is v or a is node.output for a in r.inputs)

    def operand_chain(v: Value, node):
        """The groups and views that feed v only to `node`: transposes, slices and views
        back to another kernel's output; None when v is not such a chain's end."""
        path = []  # from node upwards
        while v.producer is not None and sole_reader(v, path[-1] if path else node) \
                and v.producer.op in _OPERAND_MOVES:
            g = group_of.get(id(v))
            if g is not None:  # a copy kernel of its own: a chain of transposes / slices
                if g.output is not v or any(n.op not in _OPERAND_MOVES for n in g.nodes) \
                        or any(b.inputs[0] is not a.output or len(consumers[id(a.output)]) != 1
                               for a, b in zip(g.nodes, g.nodes[1:])):
                    break
                path.extend(reversed(g.nodes))
            else:
                path.append(v.producer)
            v = path[-1].inputs[0]
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
                        and node.output.shape == v.shape \
                        and (sole_reader(v, node) or opens_diamond(v, node)):
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
                chain = operand_chain(v, node) or []
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
