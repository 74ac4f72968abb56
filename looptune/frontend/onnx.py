"""Import an ONNX model (opset 13 and above) into the graph IR.

    graph = looptune.from_onnx("model.onnx")       # or an onnx.ModelProto

Shapes must be static: every graph input needs fixed dimensions. Initializers become
constants; shape computations on them (Shape, Gather, Concat, Unsqueeze feeding a Reshape)
are folded while importing. Batch norms fold into the convolutions before them.
"""
from __future__ import annotations

import numpy as np

from ..graph.ir import Graph, Value
from ..graph.op import get_graph_op
from ..graph.simplify import fold_conv_affine
from .common import Emitter, ImportError_, unsupported


def _onnx():
    try:
        import onnx
    except ImportError:
        raise ImportError("from_onnx needs the onnx package: pip install 'looptune[onnx]' "
                          "(or pip install onnx)") from None
    return onnx


def from_onnx(model, *, name: str | None = None) -> Graph:
    onnx = _onnx()
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        path = model
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
    if opset is None or opset < 13:
        raise ImportError_(f"the model uses ONNX opset {opset}; looptune imports opset 13 and "
                           "above (convert it with onnx.version_converter)")
    return _Importer(model.graph, name or model.graph.name or "onnx_model", opset).run()


class _Importer:
    def __init__(self, graph, name: str, opset: int):
        self.graph = graph
        self.opset = opset
        self.e = Emitter(name)
        self.env: dict = {}

    def run(self) -> Graph:
        from onnx import numpy_helper
        for init in self.graph.initializer:
            self.env[init.name] = self.e.const(init.name, numpy_helper.to_array(init))
        for inp in self.graph.input:
            if inp.name in self.env:
                continue
            t = inp.type.tensor_type
            dims = []
            for d in t.shape.dim:
                if not d.HasField("dim_value"):
                    raise ImportError_(f"input {inp.name} has a dynamic dimension "
                                       f"({d.dim_param or '?'}); looptune needs static shapes: "
                                       "fix the input shape when exporting the model")
                dims.append(d.dim_value)
            dtype = _DTYPES.get(t.elem_type)
            if dtype is None:
                raise ImportError_(f"input {inp.name}: element type {t.elem_type} is not "
                                   "supported (float32 and integer inputs are)")
            self.env[inp.name] = self.e.g.input(inp.name, tuple(dims), dtype)
        for node in self.graph.node:
            handler = _HANDLERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
            if handler is None:
                raise unsupported("ONNX", node.op_type if not node.domain else
                                  f"{node.domain}.{node.op_type}",
                                  node.name or node.output[0], _HANDLERS)
            label = node.name or node.output[0]
            missing = [i for i in node.input if i and i not in self.env]
            if missing:
                raise ImportError_(f"ONNX node {label} ({node.op_type}) reads "
                                   f"{', '.join(missing)}, which no input, initializer or "
                                   "earlier node defines (the nodes must be in topological "
                                   "order); check the model with onnx.checker.check_model")
            ins = [self.env[i] if i else None for i in node.input]
            attrs = {a.name: _attr(a) for a in node.attribute}
            try:
                outs = handler(self, label, ins, attrs)
            except ImportError_:
                raise
            except (TypeError, KeyError, ValueError) as e:
                raise ImportError_(f"ONNX operator {node.op_type} (node {label}): {e}") from None
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            for o, v in zip(node.output, outs):
                self.env[o] = v
        missing = [o.name for o in self.graph.output if o.name not in self.env]
        if missing:
            raise ImportError_(f"the model's output(s) {', '.join(missing)} are computed by no "
                               "node; check the model with onnx.checker.check_model")
        graph = self.e.g.finish(*[self.env[o.name] for o in self.graph.output])
        return fold_conv_affine(graph)

    # helpers
    def op(self, op, *inputs, name=None, **attrs) -> Value:
        if all(isinstance(v, Value) and v.is_const for v in inputs):
            # constant subgraphs (shape arithmetic, weight reshapes) fold as they are imported
            ref = get_graph_op(op).ref([v.data for v in inputs], attrs)
            return self.e.const(name or op, np.asarray(ref))
        return self.e.op(op, *inputs, name=name, **attrs)

    def ints(self, v: Value, what: str, node: str) -> list:
        if v is None:
            return None
        if not v.is_const:
            raise ImportError_(f"node {node}: {what} must be a constant (an initializer or "
                               "computed from static shapes)")
        return [int(x) for x in np.asarray(v.data).reshape(-1)]


_DTYPES = {1: "float32", 6: "int32", 7: "int32", 11: "float64"}


def _attr(a):
    from onnx import helper
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [x.decode() for x in v]
    return v


_HANDLERS: dict = {}


def _on(*ops):
    def deco(fn):
        for o in ops:
            _HANDLERS[o] = fn
        return fn
    return deco


def _unary(op):
    return lambda imp, name, ins, at: imp.op(op, ins[0], name=name)


for _k, _op in {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp",
                "Sqrt": "sqrt", "Neg": "neg", "Erf": "erf"}.items():
    _HANDLERS[_k] = _unary(_op)


@_on("Gelu")
def _gelu(imp, name, ins, at):
    return imp.op("gelu", ins[0], name=name, approximate=at.get("approximate", "none"))


def _binary(op):
    def h(imp, name, ins, at):
        a, b = ins
        for x, y, rev in ((a, b, False), (b, a, True)):  # a scalar constant becomes scalar=
            if y.is_const and y.data.size == 1 and not x.is_const:
                return imp.op(op, x, name=name, scalar=float(y.data.reshape(-1)[0]), reverse=rev)
        return imp.op(op, a, b, name=name)
    return h


for _k, _op in {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow",
                "Max": "maximum", "Min": "minimum"}.items():
    _HANDLERS[_k] = _binary(_op)


@_on("Identity", "Dropout")
def _identity(imp, name, ins, at):
    return ins[0]


@_on("Cast")
def _cast(imp, name, ins, at):
    to = _DTYPES.get(at["to"])
    x = ins[0]
    if x.is_const:
        return imp.e.const(name, x.data.astype(to or "float32"))
    if to != x.dtype:
        raise ImportError_(f"node {name}: Cast from {x.dtype} to {to} is not supported")
    return x


@_on("Constant")
def _constant(imp, name, ins, at):
    from onnx import numpy_helper
    if "value" in at:
        return imp.e.const(name, numpy_helper.to_array(at["value"]))
    for k in ("value_float", "value_int"):
        if k in at:
            return imp.e.const(name, np.asarray(at[k]))
    for k in ("value_floats", "value_ints"):
        if k in at:
            return imp.e.const(name, np.asarray(at[k]))
    raise ImportError_(f"node {name}: Constant without a value")


@_on("Shape")
def _shape(imp, name, ins, at):
    return imp.e.const(name, np.asarray(ins[0].shape, np.int64))


@_on("Conv")
def _conv(imp, name, ins, at):
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    nd = len(w.shape) - 2
    if nd != 2:
        raise ImportError_(f"node {name}: only 2-D convolutions are supported, got {nd}-D")
    strides = at.get("strides", [1, 1])
    dil = at.get("dilations", [1, 1])
    pads = _pads(name, at, x.shape[2:], w.shape[2:], strides, dil)
    if pads[0] != pads[2] or pads[1] != pads[3]:
        x = imp.op("pad", x, name=name + "_pad", pad_before=(0, 0, pads[0], pads[1]),
                   pad_after=(0, 0, pads[2], pads[3]), value=0.0)
        pads = [0, 0, 0, 0]
    y = imp.op("conv2d", x, w, name=name, stride=tuple(strides), padding=(pads[0], pads[1]),
               dilation=tuple(dil), groups=int(at.get("group", 1)))
    if b is not None:
        y = imp.op("add", y, imp.e.reshape(b, (1, b.shape[0], 1, 1)), name=name + "_bias")
    return y


def _pads(name, at, size, kernel, strides, dil):
    auto = at.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", "VALID"):
        return list(at.get("pads", [0, 0, 0, 0])) if auto == "NOTSET" else [0, 0, 0, 0]
    before, after = [], []
    for s, k, st, d in zip(size, kernel, strides, dil):
        out = -(-s // st)
        total = max(0, (out - 1) * st + (k - 1) * d + 1 - s)
        small, big = total // 2, total - total // 2
        before.append(small if auto == "SAME_UPPER" else big)
        after.append(big if auto == "SAME_UPPER" else small)
    return before + after


@_on("BatchNormalization")
def _bn(imp, name, ins, at):
    x, scale, bias, mean, var = ins[:5]
    if not all(v.is_const for v in (scale, bias, mean, var)):
        raise ImportError_(f"node {name}: BatchNormalization needs constant statistics")
    s = scale.data / np.sqrt(var.data.astype(np.float64) + at.get("epsilon", 1e-5))
    return imp.e.channel_affine(x, s, bias.data - mean.data * s, name)


@_on("MatMul")
def _matmul(imp, name, ins, at):
    return imp.e.matmul(ins[0], ins[1], name, emit=imp.op)  # imp.op folds constant operands


@_on("Gemm")
def _gemm(imp, name, ins, at):
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    if at.get("transA", 0):
        a = imp.op("transpose", a, name=name + "_ta", perm=(1, 0))
    y = imp.op("matmul", a, b, name=name, transpose_b=bool(at.get("transB", 0)))
    alpha, beta = at.get("alpha", 1.0), at.get("beta", 1.0)
    if alpha != 1.0:
        y = imp.op("mul", y, name=name + "_alpha", scalar=float(alpha))
    if c is not None:
        if beta != 1.0:
            c = imp.op("mul", c, name=name + "_beta", scalar=float(beta))
        y = imp.op("add", y, c, name=name + "_bias")
    return y


def _pool(op):
    def h(imp, name, ins, at):
        k = at["kernel_shape"]
        if at.get("ceil_mode", 0) or any(d != 1 for d in at.get("dilations", [1, 1])):
            raise ImportError_(f"node {name}: pooling with ceil_mode or dilations is not "
                               "supported")
        pads = _pads(name, at, ins[0].shape[2:], k, at.get("strides", k), [1, 1])
        if pads[0] != pads[2] or pads[1] != pads[3]:
            raise ImportError_(f"node {name}: asymmetric pooling pads {pads} are not supported")
        if op == "avg_pool2d" and any(pads) and not at.get("count_include_pad", 0):
            raise ImportError_(f"node {name}: AveragePool with pads needs count_include_pad=1")
        return imp.op(op, ins[0], name=name, kernel=tuple(k),
                      stride=tuple(at.get("strides", k)), padding=(pads[0], pads[1]))
    return h


_HANDLERS["MaxPool"] = _pool("max_pool2d")
_HANDLERS["AveragePool"] = _pool("avg_pool2d")


@_on("GlobalAveragePool")
def _gap(imp, name, ins, at):
    return imp.op("mean", ins[0], name=name, axis=(2, 3), keepdims=True)


@_on("Flatten")
def _flatten(imp, name, ins, at):
    x = ins[0]
    axis = at.get("axis", 1) % max(len(x.shape), 1)
    return imp.e.reshape(x, (int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))), name)


@_on("Reshape")
def _reshape(imp, name, ins, at):
    x = ins[0]
    shape = imp.ints(ins[1], "the shape", name)
    shape = [x.shape[i] if s == 0 and not at.get("allowzero", 0) else s
             for i, s in enumerate(shape)]
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1]))
        shape[shape.index(-1)] = int(np.prod(x.shape)) // known
    return imp.e.reshape(x, shape, name)


def _axes_of(imp, name, ins, at, pos=1):
    if "axes" in at:
        return list(at["axes"])
    return imp.ints(ins[pos], "axes", name) if len(ins) > pos and ins[pos] is not None else None


@_on("Unsqueeze")
def _unsqueeze(imp, name, ins, at):
    x = ins[0]
    axes = sorted(a % (len(x.shape) + len(_axes_of(imp, name, ins, at)))
                  for a in _axes_of(imp, name, ins, at))
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return imp.e.reshape(x, shape, name)


@_on("Squeeze")
def _squeeze(imp, name, ins, at):
    x = ins[0]
    axes = _axes_of(imp, name, ins, at)
    axes = {a % len(x.shape) for a in axes} if axes else {i for i, s in enumerate(x.shape)
                                                          if s == 1}
    return imp.e.reshape(x, [s for i, s in enumerate(x.shape) if i not in axes], name)


@_on("Transpose")
def _transpose(imp, name, ins, at):
    perm = at.get("perm", list(reversed(range(len(ins[0].shape)))))
    return imp.op("transpose", ins[0], name=name, perm=tuple(perm))


@_on("Concat")
def _concat(imp, name, ins, at):
    return imp.op("concat", *ins, name=name, axis=int(at["axis"]))


@_on("Slice")
def _slice(imp, name, ins, at):
    x = ins[0]
    starts = imp.ints(ins[1], "starts", name)
    ends = imp.ints(ins[2], "ends", name)
    axes = imp.ints(ins[3], "axes", name) if len(ins) > 3 and ins[3] is not None \
        else list(range(len(starts)))
    steps = imp.ints(ins[4], "steps", name) if len(ins) > 4 and ins[4] is not None \
        else [1] * len(starts)
    for s, e, a, st in zip(starts, ends, axes, steps):
        size = x.shape[a % len(x.shape)]
        s, e = max(min(s, size), -size), max(min(e, size), -size)
        x = imp.op("slice", x, name=name, axis=a % len(x.shape), start=s, stop=e, step=st)
    return x


@_on("Gather")
def _gather(imp, name, ins, at):
    data, idx = ins
    axis = at.get("axis", 0) % len(data.shape)
    if data.is_const and idx.is_const:
        return imp.e.const(name, np.take(data.data, idx.data.astype(np.int64), axis=axis))
    if axis != 0:
        raise ImportError_(f"node {name}: Gather on axis {axis} of a tensor is not supported "
                           "(axis 0: an embedding lookup is)")
    return imp.op("embedding", data, idx, name=name)


@_on("Softmax")
def _softmax(imp, name, ins, at):
    return imp.op("softmax", ins[0], name=name, axis=int(at.get("axis", -1)))


@_on("LayerNormalization")
def _layer_norm(imp, name, ins, at):
    x = ins[0]
    if at.get("axis", -1) % len(x.shape) != len(x.shape) - 1:
        raise ImportError_(f"node {name}: LayerNormalization over more than the last axis")
    args = [v for v in ins[:3] if v is not None]
    return imp.op("layer_norm", *args, name=name, eps=float(at.get("epsilon", 1e-5)))


def _reduce(op):
    def h(imp, name, ins, at):
        axes = _axes_of(imp, name, ins, at)
        keep = bool(at.get("keepdims", 1))
        return imp.op(op, ins[0], name=name, axis=None if axes is None else tuple(axes),
                      keepdims=keep)
    return h


_HANDLERS["ReduceMean"] = _reduce("mean")
_HANDLERS["ReduceSum"] = _reduce("sum")
_HANDLERS["ReduceMax"] = _reduce("max")
