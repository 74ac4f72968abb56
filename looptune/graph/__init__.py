"""Model-level compilation: the graph IR, its operators, fusion and task extraction."""
from .compile import compile_model
from .default_schedule import default_schedule
from .evaluate import evaluate, fold_constants
from .executor import CompiledModel, ModelError
from .export import load
from .ir import Graph, GraphBuilder, GraphError, Node, TensorType, Value
from .fuse import FusedGroup, fuse
from .op import GRAPH_OPS, GraphOp, get_graph_op
from .simplify import fold_conv_affine
from .tasks import ExtractedTask, extract_tasks
from .tune_model import model_evaluator, tune_model, untuned_tasks

__all__ = ["CompiledModel", "ModelError", "compile_model", "default_schedule", "load",
           "GRAPH_OPS", "ExtractedTask", "FusedGroup", "Graph", "GraphBuilder", "GraphError",
           "GraphOp", "Node", "TensorType", "Value", "evaluate", "extract_tasks",
           "fold_constants", "fold_conv_affine", "fuse", "get_graph_op", "model_evaluator",
           "tune_model", "untuned_tasks"]
