"""Graph operators: what a node's `op` name means.

A `GraphOp` knows how to express itself as tensor expressions (`te(inputs, attrs)`, the
source of every kernel), how to compute itself with numpy (`ref(arrays, attrs)`: constant
folding and the graph's reference evaluation) and its fusion kind:

- "anchor": the heavy operator of a kernel (matmul, conv2d, pooling); elementwise operators
  that follow it fuse into it as an epilogue;
- "reduction": softmax, layer_norm, mean and friends; elementwise operators that feed it fuse
  into it as a prologue, and those that follow it as an epilogue;
- "elementwise": one output element from the same element of each input (with numpy
  broadcasting);
- "injective": each output element copies one input element (transpose, slice, concat);
- "view": a reshape that leaves the bytes as they are: no kernel at all.

The output type comes from building the tensor expression on placeholders of the input
types, so shapes are checked and inferred by the same code that makes the kernel.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ... import te
from ...registry import Registry
from ..ir import GraphError, TensorType

KINDS = ("anchor", "reduction", "elementwise", "injective", "view")


@dataclass(frozen=True)
class GraphOp:
    """What one operator name means (module docstring); made and registered by the `graph_op`
    decorator."""

    name: str
    kind: str
    te: Callable       # (list of te.Tensor, attrs: dict, name: str) -> te.Tensor
    ref: Callable      # (list of np.ndarray, attrs: dict) -> np.ndarray
    attrs: tuple = ()  # the attribute names it accepts
    doc: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"graph op {self.name}: kind must be one of {KINDS}")

    def check_attrs(self, attrs: dict, node: str) -> None:
        """GraphError naming node `node` if `attrs` has a name this operator does not take."""
        unknown = sorted(set(attrs) - set(self.attrs))
        if unknown:
            raise GraphError(f"node {node} ({self.name}): unknown attribute(s) "
                             f"{', '.join(unknown)}; {self.name} takes "
                             f"{', '.join(self.attrs) or 'no attributes'}")

    def infer(self, types: list, attrs: dict, node: str) -> TensorType:
        """The output type of this operator on inputs of `types` with `attrs`, from its tensor
        expression (cached); GraphError naming `node` if it does not apply."""
        self.check_attrs(attrs, node)
        key = (self.name, tuple(types), tuple(sorted(attrs.items())))
        known = _INFERRED.get(key)
        if known is None:
            if len(_INFERRED) > 100_000:
                _INFERRED.clear()
            known = _INFERRED[key] = self._infer(types, attrs, node)
        return known

    def _infer(self, types: list, attrs: dict, node: str) -> TensorType:
        placeholders = [te.placeholder(t.shape, name=f"in{i}", dtype=t.dtype)
                        for i, t in enumerate(types)]
        try:
            out = self.te(placeholders, attrs, node)
        except GraphError:
            raise
        except (te.TEError, ValueError, TypeError, IndexError) as e:
            shapes = ", ".join(str(t) for t in types)
            raise GraphError(f"node {node} ({self.name}) on inputs ({shapes}): {e}") from None
        return TensorType(out.shape, out.dtype)


GRAPH_OPS = Registry("operator", error=GraphError)
# (op, input types, attributes) -> output type: every graph rewrite of prepare() rebuilds
# the graph, and building the tensor expression for each node each time cost seconds a model
_INFERRED: dict = {}


def register_graph_op(op: GraphOp) -> GraphOp:
    if op.name in GRAPH_OPS:
        raise ValueError(f"graph op {op.name!r} is already registered")
    return GRAPH_OPS.add(op.name, op)


def get_graph_op(name: str, node: str | None = None) -> GraphOp:
    return GRAPH_OPS.lookup(name, f"node {node}: " if node else "")


def graph_op(name: str, kind: str, attrs: tuple = (), ref: Callable | None = None):
    """Decorator: register `fn(inputs, attrs, name) -> te.Tensor` as operator `name`."""
    def deco(fn):
        register_graph_op(GraphOp(name, kind, fn, ref, tuple(attrs), (fn.__doc__ or "").strip()))
        return fn
    return deco
