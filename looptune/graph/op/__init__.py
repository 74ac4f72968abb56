"""The graph operator registry (see base.py); importing this package registers them all."""
from . import attention, compare, elementwise, gather, math, nn, norm, resize, shape  # noqa: F401  (registration)
from .base import GRAPH_OPS, KINDS, GraphOp, get_graph_op, graph_op, register_graph_op

__all__ = ["GRAPH_OPS", "KINDS", "GraphOp", "get_graph_op", "graph_op", "register_graph_op"]
