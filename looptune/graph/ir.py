"""The model IR: a small, typed dataflow graph of operators.

A `Graph` holds its inputs, its nodes in topological order and its outputs. Every edge is a
`Value` with a static `TensorType` (shape and dtype); a value is a graph input, a constant
(a numpy array: the model's weights) or the output of one `Node`. A node names an operator of
the graph operator registry (`looptune.graph.op`) and carries plain-data attributes.

    g = GraphBuilder("mlp")
    x = g.input("x", (1, 784))
    h = g.op("matmul", x, g.const("w1", w1), transpose_b=True)
    y = g.op("relu", g.op("add", h, g.const("b1", b1)))
    graph = g.finish(y)
    print(graph)

Graphs compare structurally (`graph.structural_key()`, `structurally_equal`): names of values
and nodes do not matter, operators, attributes, types, wiring and constant data do.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np


class GraphError(ValueError):
    """A malformed graph, an unknown operator or bad operator attributes."""


@dataclass(frozen=True)
class TensorType:
    """The static type of a Value: its shape and dtype."""

    shape: tuple
    dtype: str = "float32"

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


class Value:
    """An edge of the graph. `data` is set for constants; `producer` for node outputs."""

    __slots__ = ("name", "type", "data", "producer")

    def __init__(self, name: str, type: TensorType, data: np.ndarray | None = None,
                 producer: "Node | None" = None):
        self.name = name
        self.type = type
        self.data = data
        self.producer = producer

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def shape(self) -> tuple:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


def _freeze(v):
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    raise GraphError(f"attribute value {v!r} ({type(v).__name__}) is not plain data "
                     "(int, float, bool, str, None or tuples of them)")


class Node:
    """One operator application with one output."""

    __slots__ = ("op", "inputs", "attrs", "output", "name")

    def __init__(self, op: str, inputs: tuple, attrs: dict, output: Value, name: str):
        self.op = op
        self.inputs = tuple(inputs)
        self.attrs = {k: _freeze(v) for k, v in sorted(attrs.items())}
        self.output = output
        self.name = name

    def __repr__(self) -> str:
        args = ", ".join(f"%{v.name}" for v in self.inputs)
        attrs = "".join(f", {k}={v!r}" for k, v in self.attrs.items())
        return f"%{self.output.name} = {self.op}({args}{attrs})  # {self.output.type}"


class Graph:
    """A model: inputs, nodes in topological order, outputs (module docstring). Build one with
    GraphBuilder or a frontend; it checks its wiring when made."""

    def __init__(self, name: str, inputs: list, nodes: list, outputs: list):
        self.name = name
        self.inputs = list(inputs)
        self.nodes = list(nodes)
        self.outputs = list(outputs)
        self.prepared = False  # set by graph.simplify.prepare
        self.validate()

    # ------------------------------------------------------------------ structure
    def validate(self) -> None:
        """Every node reads values defined before it; outputs are defined."""
        defined = {id(v) for v in self.inputs}
        for n in self.nodes:
            for v in n.inputs:
                if not v.is_const and id(v) not in defined:
                    raise GraphError(f"node {n.name} ({n.op}) reads %{v.name}, which is neither a "
                                     "graph input, a constant nor an earlier node's output")
            defined.add(id(n.output))
        for v in self.outputs:
            if not v.is_const and id(v) not in defined:
                raise GraphError(f"graph output %{v.name} is not produced by the graph")

    @property
    def constants(self) -> list:
        seen, out = set(), []
        for n in self.nodes:
            for v in n.inputs:
                if v.is_const and id(v) not in seen:
                    seen.add(id(v))
                    out.append(v)
        return out

    def consumers(self) -> dict:
        """id(value) -> the nodes that read it."""
        out: dict = {}
        for n in self.nodes:
            for v in n.inputs:
                out.setdefault(id(v), []).append(n)
        return out

    # ------------------------------------------------------------------ printing
    def __str__(self) -> str:
        ins = ", ".join(repr(v) for v in self.inputs)
        lines = [f"graph {self.name}({ins}):"]
        for c in self.constants:
            lines.append(f"  %{c.name}: {c.type} = const")
        lines += [f"  {n!r}" for n in self.nodes]
        lines.append(f"  return {', '.join('%' + v.name for v in self.outputs)}")
        return "\n".join(lines)

    __repr__ = __str__

    # ------------------------------------------------------------------ identity
    def structural_key(self) -> str:
        """A hash of the graph's structure that ignores every name."""
        h = hashlib.sha256()
        index: dict = {}

        def ref(v: Value) -> str:
            if id(v) not in index:
                if v.is_const:
                    data = np.ascontiguousarray(v.data)
                    index[id(v)] = f"c{len(index)}:{v.type}:" + hashlib.sha256(
                        data.tobytes()).hexdigest()[:16]
                else:
                    index[id(v)] = f"v{len(index)}:{v.type}"
            return index[id(v)]

        for v in self.inputs:
            h.update(ref(v).encode())
        for n in self.nodes:
            args = ",".join(ref(v) for v in n.inputs)
            h.update(f"{n.op}({args}){n.attrs!r}->".encode())
            h.update(ref(n.output).encode())
        h.update(("return " + ",".join(ref(v) for v in self.outputs)).encode())
        return h.hexdigest()

    def structurally_equal(self, other: "Graph") -> bool:
        return isinstance(other, Graph) and self.structural_key() == other.structural_key()


class GraphBuilder:
    """Builds a Graph node by node, inferring each output's type from the operator."""

    def __init__(self, name: str = "model"):
        self.name = name
        self.inputs: list = []
        self.nodes: list = []
        self._names: set = set()

    def _unique(self, base: str) -> str:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in str(base)) or "v"
        name, i = base, 1
        while name in self._names:
            name, i = f"{base}_{i}", i + 1
        self._names.add(name)
        return name

    def input(self, name: str, shape, dtype: str = "float32") -> Value:
        v = Value(self._unique(name), TensorType(shape, dtype))
        self.inputs.append(v)
        return v

    def const(self, name: str, data) -> Value:
        arr = np.ascontiguousarray(np.asarray(data))
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        return Value(self._unique(name), TensorType(arr.shape, str(arr.dtype)), data=arr)

    def op(self, op: str, *inputs: Value, name: str | None = None, **attrs: Any) -> Value:
        from .op import get_graph_op
        node_name = self._unique(name or op)
        for i, v in enumerate(inputs):
            if not isinstance(v, Value):
                raise GraphError(f"node {node_name} ({op}): input {i} is a "
                                 f"{type(v).__name__}, not a graph Value")
        opdef = get_graph_op(op, node_name)
        frozen = {}
        for k, v in attrs.items():
            try:
                frozen[k] = _freeze(v)
            except GraphError as e:
                raise GraphError(f"node {node_name} ({op}): attribute {k}: {e}") from None
        attrs = frozen
        out_type = opdef.infer([v.type for v in inputs], attrs, node_name)
        out = Value(node_name, out_type)
        node = Node(op, inputs, attrs, out, node_name)
        out.producer = node
        self.nodes.append(node)
        return out

    def finish(self, *outputs: Value) -> Graph:
        return Graph(self.name, self.inputs, self.nodes, list(outputs))


def rebuild(graph: Graph, rewrite) -> Graph:
    """A copy of `graph` in which `rewrite(g, node, get)` may replace each node: it returns the
    Value that stands for the node's output, built in GraphBuilder `g` (`get(v)` is the new
    graph's value for an old one), or None to copy the node as it is."""
    g = GraphBuilder(graph.name)
    vmap: dict = {id(v): g.input(v.name, v.shape, v.dtype) for v in graph.inputs}

    def get(v):
        return v if v.is_const else vmap[id(v)]

    for node in graph.nodes:
        out = rewrite(g, node, get)
        if out is None:
            out = g.op(node.op, *[get(v) for v in node.inputs], name=node.name, **node.attrs)
        vmap[id(node.output)] = out
    return g.finish(*[get(v) for v in graph.outputs])
