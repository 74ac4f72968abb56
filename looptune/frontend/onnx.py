"""Import an ONNX model (opset 13 to 21) into the graph IR.

    graph = looptune.from_onnx("model.onnx")       # or an onnx.ModelProto

Shapes must be static: every graph input needs fixed dimensions. Initializers become
constants, and every node whose inputs are all constants is evaluated while importing (by the
graph operator's numpy reference, else by onnx.reference on that one node), so shape
arithmetic, masks, Range, ConstantOfShape and the like vanish whatever computes them. Batch
norms fold into the convolutions before them. An unsupported model gets one error that names
every operator it cannot translate. The translations of the operators are in onnx_ops.py,
onnx_nn.py and onnx_index.py; those of quantized models in onnx_quant.py and onnx_qlinear.py.
"""
from __future__ import annotations

import numpy as np

from ..graph.ir import Graph, GraphError, TensorType, Value
from ..graph.op import get_graph_op
from ..graph.simplify import fold_conv_affine, remove_dead
from .common import Emitter, ImportError_, ProblemCollector
from . import onnx_index, onnx_nn, onnx_qlinear, onnx_quant  # noqa: F401  (their handlers)
from .onnx_ops import HANDLERS, InvalidModel
from .onnx_qdq import remember_weight

OPSETS = (13, 21)  # the default-domain opsets the translations follow


def _onnx():
    try:
        import onnx
    except ImportError:
        raise ImportError("from_onnx needs the onnx package: pip install 'looptune[onnx]' "
                          "(or pip install onnx)") from None
    return onnx


def from_onnx(model, *, name: str | None = None) -> Graph:
    onnx = _onnx()
    where = "the model"
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        where = path = str(model)
        try:
            model = onnx.load(path)
        except OSError as e:
            raise ImportError_(f"cannot read the ONNX model {path} ({e.strerror or e}); give "
                               "the path of an existing .onnx file") from None
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and its kin
            raise ImportError_(f"{path} is not an ONNX model ({type(e).__name__}: {e}); export "
                               "it again (torch.onnx.export) or check the path") from None
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"from_onnx needs an onnx.ModelProto or a path, got "
                        f"{type(model).__name__}")
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None:
        raise ImportError_(f"{where} holds no ONNX model: it imports no opset of the default "
                           "ONNX domain (an empty or truncated file?); export the model again")
    if opset < OPSETS[0]:
        raise ImportError_(f"the model uses ONNX opset {opset}; looptune imports opset "
                           f"{OPSETS[0]} and above (convert it with onnx.version_converter)")
    return _Importer(model, name or model.graph.name or "onnx_model", opset).run()


# ONNX element type -> the graph's dtype (integers and booleans are int32 in a graph)
_GRAPH_DTYPES = {1: "float32", 10: "float32", 11: "float32", 16: "float32",
                 2: "int32", 3: "int32", 4: "int32", 5: "int32", 6: "int32", 7: "int32",
                 9: "int32", 12: "int32", 13: "int32"}


def graph_dtype(elem_type: int) -> str | None:
    return _GRAPH_DTYPES.get(elem_type)


class _Emitter(Emitter):
    def const(self, name: str, data) -> Value:
        """A constant that keeps a 0-d array 0-d (GraphBuilder.const makes it 1-d), so that
        scalars broadcast, index and fold as ONNX says."""
        v = super().const(name, data)
        if np.ndim(data) == 0 and v.shape != ():
            v = Value(v.name, TensorType((), v.dtype), data=v.data.reshape(()))
        return v


class _Importer:
    def __init__(self, model, name: str, opset: int):
        self.model = model
        self.graph = model.graph
        self.name = name
        self.opset = opset
        self.e = _Emitter(name)
        self.env: dict = {}
        self.problems = ProblemCollector()
        self.tainted: set = set()   # ids of values whose type is a guess (after a failure)
        self._types = None          # value name -> (shape or None, elem type), on demand
        self._graph_consts: dict = {}
        self.node = None            # the ONNX node being translated
        self.dequantized: dict = {}  # id(value) -> (value, q, scale, zp) (onnx_quant.py)
        self._uses = None           # value name -> (the ONNX node that makes it, its readers)
        self.quantized_consts: dict = {}  # id(value) -> (value, q, scale, zp, axis) (onnx_qdq.py)

    # ------------------------------------------------------------------ driver
    def run(self) -> Graph:
        from onnx import numpy_helper
        for init in self.graph.initializer:
            self.env[init.name] = self.e.const(init.name, numpy_helper.to_array(init))
        for inp in self.graph.input:
            if inp.name not in self.env:
                self.env[inp.name] = self.graph_input(inp)
        for node in self.graph.node:
            self.translate(node)
        self.problems.raise_if_any("ONNX", self.name)
        missing = [o.name for o in self.graph.output if o.name not in self.env]
        if missing:
            raise ImportError_(f"the model's output(s) {', '.join(missing)} are computed by no "
                               "node; check the model with onnx.checker.check_model")
        # an output folded to a constant keeps no ONNX type either: int32 or float32 as every
        # computed output (a bool or int64 one came back as such, unlike the same one computed)
        graph = self.e.g.finish(*[self.graph_value(self.env[o.name])
                                  for o in self.graph.output])
        return remove_dead(fold_conv_affine(graph))

    def graph_input(self, inp) -> Value:
        t = inp.type.tensor_type
        dims = []
        for d in t.shape.dim:
            if not d.HasField("dim_value"):
                raise ImportError_(f"input {inp.name} has a dynamic dimension "
                                   f"({d.dim_param or '?'}); looptune needs static shapes: "
                                   "fix the input shape when exporting the model")
            dims.append(d.dim_value)
        dtype = graph_dtype(t.elem_type)
        if dtype is None:
            raise ImportError_(f"input {inp.name}: element type {t.elem_type} is not "
                               "supported (float and integer inputs are)")
        return self.e.g.input(inp.name, tuple(dims), dtype)

    def translate(self, node) -> None:
        self.node = node
        label = node.name or node.output[0]
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        missing = [i for i in node.input if i and i not in self.env]
        if missing:
            raise ImportError_(f"ONNX node {label} ({op}) reads {', '.join(missing)}, which no "
                               "input, initializer or earlier node defines (the nodes must be "
                               "in topological order); check the model with "
                               "onnx.checker.check_model")
        ins = [self.env[i] if i else None for i in node.input]
        attrs = {a.name: _attr(a) for a in node.attribute}
        handler = HANDLERS.get(op)
        tainted = any(v is not None and id(v) in self.tainted for v in ins)
        if not tainted and all(v is None or v.is_const for v in ins):
            outs = self.fold(node, handler, label, ins, attrs)
            if outs is not None:
                if op == "DequantizeLinear":  # a quantized weight: its integers kept aside
                    remember_weight(self, ins, attrs, outs[0])
                return self.bind(node, outs)
        if handler is None:
            self.problems.add(op, label)
            return self.stand_in(node)
        mark = len(self.e.g.nodes)
        try:
            outs = handler(self, label, ins, attrs)
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            unmade = [o for o in node.output[len(outs):] if o]
            if unmade:
                raise ImportError_(f"its output {unmade[0]} is not supported")
        except InvalidModel:
            raise
        except (GraphError, TypeError, KeyError, ValueError, IndexError, ArithmeticError) as e:
            del self.e.g.nodes[mark:]
            if not tainted:  # else the failure may be the guess's, not the operator's
                self.problems.add(op, label, _reason(e, label))
            return self.stand_in(node)
        self.bind(node, outs)
        if tainted:
            self.tainted.update(id(self.env[o]) for o in node.output if o in self.env)

    def bind(self, node, outs) -> None:
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        for o, v in zip(node.output, outs):
            if o:
                self.env[o] = v

    def fold(self, node, handler, label, ins, attrs):
        """The outputs of a node whose inputs are all constants, as constants (None if
        neither the translation nor onnx.reference can compute them)."""
        if handler is not None:
            mark = len(self.e.g.nodes)
            try:
                outs = handler(self, label, ins, attrs)
                outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
                if all(isinstance(v, Value) and v.is_const for v in outs):
                    return [self.typed_const(o, v) for o, v in zip(node.output, outs)]
            except InvalidModel:
                raise
            except Exception:  # noqa: BLE001 - onnx.reference gets its chance below
                pass
            del self.e.g.nodes[mark:]
        try:
            arrays = self.evaluate(node, ins)
        except Exception:  # noqa: BLE001 - not computable here: translate it as a node
            return None
        return [self.e.const(o or "folded", np.asarray(a)) for o, a in zip(node.output, arrays)]

    def evaluate(self, node, ins) -> list:
        """onnx.reference on this one node, inputs cast to the types the model declares."""
        from onnx import helper
        from onnx.reference import ReferenceEvaluator
        feeds = {}
        for name, v in zip(node.input, ins):
            if name:
                _, elem = self.type_of(name)
                data = v.data
                if elem:
                    data = data.astype(helper.tensor_dtype_to_np_dtype(elem))
                feeds[name] = data
        opsets = {o.domain: o.version for o in self.model.opset_import}
        return ReferenceEvaluator(node, opsets=opsets).run(None, feeds)

    def typed_const(self, name: str, v: Value) -> Value:
        """A folded constant in the element type the model declares for it (bool masks
        stay bool, shapes int64), so that later folds compute what ONNX would."""
        from onnx import helper
        _, elem = self.type_of(name) if name else (None, None)
        if elem:
            want = helper.tensor_dtype_to_np_dtype(elem)
            if v.data.dtype != want and not (want == np.float64 and v.dtype == "float32"):
                return self.e.const(name, v.data.astype(want))
        return v

    def stand_in(self, node) -> None:
        """Values of the model's declared types for a node that could not be translated, so
        that the nodes after it are translated too and their problems found."""
        for o in node.output:
            if o:
                shape, elem = self.type_of(o)
                v = Value(o, TensorType(shape or (), graph_dtype(elem) or "float32"))
                if shape is None:
                    self.tainted.add(id(v))
                self.env[o] = v

    def type_of(self, name: str):
        """(shape or None, ONNX element type or None) the model declares or ONNX's shape
        inference finds for a value."""
        if self._types is None:
            self._types = {}
            self._collect_types(self.graph)
        if name not in self._types and not getattr(self, "_inferred", False):
            self._inferred = True
            import onnx
            try:
                self._collect_types(onnx.shape_inference.infer_shapes(self.model).graph)
            except Exception:  # noqa: BLE001 - inference is a help, not a need
                pass
        return self._types.get(name, (None, None))

    def uses(self, name: str):
        """(the ONNX node that makes value `name` or None, how many nodes and graph outputs
        read it): what a QDQ group that ONNX Runtime fuses must look like (onnx_quant.py)."""
        if self._uses is None:
            made = {o: n for n in self.graph.node for o in n.output if o}
            reads: dict = {}
            for i in [i for n in self.graph.node for i in n.input] + \
                    [o.name for o in self.graph.output]:
                reads[i] = reads.get(i, 0) + 1
            self._uses = made, reads
        return self._uses[0].get(name), self._uses[1].get(name, 0)

    def declare(self, name: str, elem_type: int) -> None:
        """The element type of a value that its translation knows and ONNX's shape inference
        may not (the output of a com.microsoft operator), for the nodes that read it."""
        shape, elem = self.type_of(name)
        if not elem:
            self._types[name] = (shape, elem_type)

    def _collect_types(self, graph) -> None:
        for vi in list(graph.value_info) + list(graph.input) + list(graph.output):
            t = vi.type.tensor_type
            if not t.elem_type:
                continue
            dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
            shape = tuple(dims) if t.HasField("shape") and None not in dims else None
            self._types[vi.name] = (shape, t.elem_type)
        for init in graph.initializer:
            self._types[init.name] = (tuple(init.dims), init.data_type)

    # ------------------------------------------------------------------ helpers for handlers
    def op(self, op, *inputs, name=None, **attrs) -> Value:
        """A graph node, or its value when every input is a constant."""
        if all(isinstance(v, Value) and v.is_const for v in inputs):
            ref = get_graph_op(op).ref([v.data for v in inputs], attrs)
            return self.e.const(name or op, np.asarray(ref))
        args = [self.graph_value(v) for v in inputs]
        if get_graph_op(op).kind == "elementwise" and any(v.shape for v in args):
            # a 0-d constant among tensors broadcasts as a 1-element vector, which every
            # kernel argument path handles
            args = [self.e.reshape(v, (1,)) if v.is_const and v.shape == () else v
                    for v in args]
        return self.e.op(op, *args, name=name, **attrs)

    def graph_value(self, v: Value) -> Value:
        """A constant as the graph holds it: int32 for integers and booleans, float32."""
        if not v.is_const or v.dtype in ("float32", "int32"):
            return v
        key = id(v)
        if key not in self._graph_consts:
            d = v.data
            data = d.astype(np.float32) if d.dtype.kind == "f" else \
                np.clip(d, -2 ** 31, 2 ** 31 - 1).astype(np.int32)
            self._graph_consts[key] = (v, self.e.const(v.name, data))
        return self._graph_consts[key][1]

    def const(self, name: str, data) -> Value:
        return self.e.const(name, data)

    def ints(self, v: Value, what: str, node: str) -> list:
        if v is None:
            return None
        return [int(x) for x in self.array(v, what, node).reshape(-1)]

    def array(self, v: Value, what: str, node: str) -> np.ndarray:
        if not v.is_const:
            raise ImportError_(f"node {node}: {what} must be a constant (an initializer or "
                               "computed from static shapes)")
        return np.asarray(v.data)


def _reason(e: Exception, label: str) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = text.split("; registered:")[0]  # an unknown graph operator: not the whole list
    for prefix in (f"node {label}: ", f"ONNX node {label}: "):
        text = text[len(prefix):] if text.startswith(prefix) else text
    return text if isinstance(e, GraphError) else f"{type(e).__name__}: {text}"


def _attr(a):
    from onnx import helper
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [x.decode() for x in v]
    return v
