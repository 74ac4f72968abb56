"""Run a graph with numpy, node by node, on each operator's numpy reference: the model's
reference output, and how constant subgraphs are folded."""
from __future__ import annotations

import numpy as np

from .ir import Graph, GraphBuilder, GraphError, Value
from .op import get_graph_op


def evaluate(graph: Graph, *inputs) -> list:
    """The graph's outputs (numpy arrays) for these inputs."""
    if len(inputs) != len(graph.inputs):
        raise GraphError(f"graph {graph.name} takes {len(graph.inputs)} inputs "
                         f"({', '.join(repr(v) for v in graph.inputs)}), got {len(inputs)}")
    env: dict = {}
    for v, a in zip(graph.inputs, inputs):
        a = np.asarray(a)
        if a.shape != v.shape:
            raise GraphError(f"input %{v.name} must have shape {v.shape}, got {a.shape}")
        env[id(v)] = a.astype(v.dtype, copy=False)
    for n in graph.nodes:
        args = [v.data if v.is_const else env[id(v)] for v in n.inputs]
        env[id(n.output)] = _run_node(n, args)
    return [v.data if v.is_const else env[id(v)] for v in graph.outputs]


def _run_node(node, args) -> np.ndarray:
    out = np.asarray(get_graph_op(node.op).ref(args, node.attrs))
    if out.shape != node.output.shape:
        out = out.reshape(node.output.shape)  # a full reduction's (1,) versus numpy's ()
    return out.astype(node.output.dtype, copy=False)


def fold_constants(graph: Graph) -> Graph:
    """The graph with every node whose inputs are all constants replaced by its value (so
    weight transposes, reshapes and scalings happen once, at compile time)."""
    g = GraphBuilder(graph.name)
    vmap: dict = {}
    for v in graph.inputs:
        vmap[id(v)] = g.input(v.name, v.shape, v.dtype)

    def get(v: Value) -> Value:
        return v if v.is_const else vmap[id(v)]

    for n in graph.nodes:
        args = [get(v) for v in n.inputs]
        if all(a.is_const for a in args):
            vmap[id(n.output)] = g.const(n.output.name, _run_node(n, [a.data for a in args]))
        else:
            vmap[id(n.output)] = g.op(n.op, *args, name=n.name, **n.attrs)
    return g.finish(*[get(v) for v in graph.outputs])
