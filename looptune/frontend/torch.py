"""Import a PyTorch module (or a torch.export ExportedProgram) into the graph IR.

    graph = looptune.from_torch(model, (torch.randn(1, 3, 224, 224),))
    graph = looptune.from_torch(torch.export.export(model, inputs))

The module is exported in eval mode at the example inputs' shapes (static shapes) and
decomposed to core ATen, keeping the high-level operators the graph has (attention,
layer_norm, linear, conv, hardswish, ...). Parameters, buffers and every node whose inputs
are all constants (masks, position ids, shape arithmetic) are evaluated by torch at import
and become constants. Int64 tensors become int32. An unsupported model raises one
`UnsupportedOperators` naming every operator it lacks. The translations live in
torch_ops.py (elementwise, reductions), torch_nn.py, torch_shape.py and torch_quant.py (the
quantize / dequantize operators of a PT2E-quantized model).
"""
from __future__ import annotations

import numpy as np

from ..graph.ir import Graph, GraphError, Value
from ..graph.simplify import fold_conv_affine
from .common import Emitter, ImportError_, ProblemCollector
from . import torch_nn, torch_quant, torch_shape  # noqa: F401  (registration)
from .torch_ops import HANDLERS, SKIP, graph_dtype

# CompositeImplicit operators kept whole rather than decomposed: the graph has them (or
# translates them better than their decompositions)
KEEP = ("scaled_dot_product_attention.default", "layer_norm.default", "linear.default",
        "conv1d.default", "conv2d.default", "conv1d.padding", "conv2d.padding",
        "hardswish.default", "hardsigmoid.default", "silu.default", "gelu.default",
        "log_softmax.int", "softmax.int", "group_norm.default", "pixel_shuffle.default",
        "upsample_nearest2d.vec", "upsample_bilinear2d.vec", "mish.default")


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("from_torch needs PyTorch: pip install 'looptune[torch]' (or "
                          "pip install torch)") from None
    return torch


def from_torch(model, example_inputs=None, *, name: str | None = None) -> Graph:
    """`model`: an nn.Module (exported at `example_inputs`, a tensor or a tuple of them) or
    a torch.export.ExportedProgram (then `example_inputs` is not needed)."""
    torch = _torch()
    if isinstance(model, torch.export.ExportedProgram):
        ep = model
        name = name or "ExportedProgram"
    elif isinstance(model, torch.nn.Module):
        if example_inputs is None:
            raise TypeError("from_torch(module, example_inputs): a module needs example inputs "
                            "to be exported at; or pass a torch.export.ExportedProgram")
        ep = _export(torch, model, example_inputs)
        name = name or type(model).__name__
    else:
        raise TypeError(f"from_torch needs a torch.nn.Module or a torch.export.ExportedProgram, "
                        f"got {type(model).__name__}")
    ep = ep.run_decompositions(_decompositions(torch))
    return _Importer(ep, name).run()


def _export(torch, module, example_inputs):
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    module = module.eval()
    try:
        with torch.no_grad():
            return torch.export.export(module, tuple(example_inputs))
    except Exception as e:  # noqa: BLE001 - torch's many export errors, one message
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ImportError_(f"torch.export cannot export {type(module).__name__} at the example "
                           f"inputs' shapes ({type(e).__name__}: {first}); looptune imports "
                           "modules that torch.export can trace: static shapes, no control "
                           "flow on tensor values, example inputs the module accepts") from None


def _decompositions(torch):
    table = torch.export.default_decompositions()
    for key in KEEP:
        packet, overload = key.split(".")
        op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
        if op is not None and op in table:
            del table[op]
    return table


def _np(t) -> np.ndarray:
    """A torch tensor as the graph stores it: float32 or int32 (booleans as 0/1), 0-d as (1,)."""
    a = t.detach().cpu().contiguous()
    a = a.reshape(1) if a.dim() == 0 else a
    if a.dtype.is_floating_point:
        return a.float().numpy()
    if a.dtype.is_complex:
        raise ImportError_(f"complex tensor of shape {tuple(a.shape)}: not supported")
    return a.int().numpy()


def _shape(t) -> tuple:
    try:
        return tuple(int(s) for s in t.shape) or (1,)
    except Exception:  # noqa: BLE001 - a symbolic size torch cannot make an int
        raise ImportError_(f"a tensor of shape {tuple(t.shape)}: looptune imports static shapes; "
                           "export without dynamic_shapes") from None


def _dynamic(v) -> bool:
    if isinstance(v, (list, tuple)):
        return any(_dynamic(x) for x in v)
    return isinstance(v, Value)


class TorchEmitter(Emitter):
    """The Emitter the handlers get: `node` is the FX node being translated; `value_of(a)` is
    an FX argument (of another node) as the handlers get theirs."""

    node = None
    value_of = None

    @property
    def out_shape(self) -> tuple:
        """The node's shape; a 0-d tensor is (1,) in the graph, as a full reduction's is."""
        return _shape(self._first_output())

    @property
    def out_dtype(self) -> str:
        return graph_dtype(self._first_output().dtype)

    def _first_output(self):
        val = self.node.meta["val"]
        return val[0] if isinstance(val, (list, tuple)) else val


class _Importer:
    def __init__(self, ep, name: str):
        self.ep = ep
        self.name = name
        self.e = TorchEmitter(name)
        self.e.value_of = self.arg
        self.env: dict = {}      # node name -> Value | torch.Tensor (a constant) | Python value
        self.values: dict = {}   # node name -> the graph constant made of a torch constant
        self.problems = ProblemCollector()

    # ------------------------------------------------------------------ driver
    def run(self) -> Graph:
        torch = _torch()
        sig = self.ep.graph_signature
        consts = {**sig.inputs_to_parameters, **sig.inputs_to_buffers,
                  **getattr(sig, "inputs_to_lifted_tensor_constants", {})}
        tensors = {**self.ep.state_dict, **getattr(self.ep, "constants", {})}
        outputs = []
        for node in self.ep.graph.nodes:
            if node.op == "placeholder":
                if node.name in consts:
                    self.env[node.name] = tensors[consts[node.name]].detach()
                else:
                    meta = node.meta["val"]
                    if not isinstance(meta, torch.Tensor):
                        raise ImportError_(f"input {node.name} is a {type(meta).__name__}, not "
                                           "a tensor: looptune models take tensors only")
                    self.env[node.name] = self.e.g.input(node.name, _shape(meta),
                                                         graph_dtype(meta.dtype))
            elif node.op == "call_function":
                self.env[node.name] = self.call(node)
            elif node.op == "output":
                outputs = [self.value(a) for a in node.args[0]]
        self.problems.raise_if_any("PyTorch", self.name)
        return fold_conv_affine(self.e.g.finish(*outputs))

    def call(self, node):
        key = str(node.target).replace("aten.", "", 1)
        if key in SKIP:
            return None
        if self.all_constant(node):
            folded = self.fold(node)
            if folded is not None:
                return folded
        handler = HANDLERS.get(key)
        if handler is None:
            self.problems.add(str(node.target), node.name)
            return self.stand_in(node)
        args = [self.arg(a) for a in node.args]
        kwargs = {k: self.arg(v) for k, v in node.kwargs.items()}
        self.e.node = node
        try:
            out = handler(self.e, node.name, *args, **kwargs)
            self.check_shape(node, out)
            return out
        except (ImportError_, GraphError, TypeError) as e:
            why = str(e).replace(f"node {node.name}: ", "").split("; registered:")[0]
            self.problems.add(str(node.target), node.name, why)
            return self.stand_in(node)

    def check_shape(self, node, out) -> None:
        meta = node.meta.get("val")
        if isinstance(out, Value) and hasattr(meta, "shape") and out.shape != _shape(meta):
            raise ImportError_(f"translated to shape {out.shape}, torch says "
                               f"{tuple(meta.shape)} (an importer bug)")

    # ------------------------------------------------------------------ constants
    def all_constant(self, node) -> bool:
        import torch.fx as fx
        leaves = []
        fx.node.map_arg((node.args, node.kwargs), leaves.append)
        return not any(_dynamic(self.env[n.name]) for n in leaves)

    def fold(self, node):
        """The node evaluated by torch on its constant inputs (None if torch refuses)."""
        import torch.fx as fx
        torch = _torch()
        args, kwargs = fx.node.map_aggregate((node.args, node.kwargs), lambda a: (
            self.env[a.name] if isinstance(a, fx.Node) else a))
        try:
            with torch.no_grad():
                return node.target(*args, **kwargs)
        except Exception:  # noqa: BLE001 - then the handler translates it
            return None

    def value(self, a):
        """A graph value for argument `a`, making a constant of a torch tensor once."""
        import torch.fx as fx
        torch = _torch()
        if isinstance(a, fx.Node):
            v = self.env[a.name]
            if isinstance(v, torch.Tensor):
                if a.name not in self.values:
                    self.values[a.name] = self.e.g.const(a.name, _np(v))
                return self.values[a.name]
            return v
        if isinstance(a, torch.Tensor):
            return self.e.g.const("const", _np(a))
        return a

    def arg(self, a):
        import torch.fx as fx
        if isinstance(a, fx.Node):
            v = self.env[a.name]
            if isinstance(v, (list, tuple)):  # a tuple-valued constant node
                return type(v)(self.value(x) if hasattr(x, "shape") else x for x in v)
            return self.value(a)
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        return a

    def stand_in(self, node):
        """A fresh input of the node's type, so the walk goes on and finds later problems."""
        torch = _torch()
        meta = node.meta.get("val")
        if isinstance(meta, torch.Tensor):
            return self.e.g.input(node.name + "_unsupported", _shape(meta),
                                  graph_dtype(meta.dtype))
        if isinstance(meta, (list, tuple)):
            return tuple(self.e.g.input(f"{node.name}_{i}_unsupported", _shape(m),
                                        graph_dtype(m.dtype))
                         if isinstance(m, torch.Tensor) else None for i, m in enumerate(meta))
        return meta
