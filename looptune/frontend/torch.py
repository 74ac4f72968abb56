"""Import a PyTorch module through `torch.export` into the graph IR.

    graph = looptune.from_torch(model, (torch.randn(1, 3, 224, 224),))

The module is exported in eval mode at the example inputs' shapes (static shapes); its
parameters and buffers become constants. Batch norms fold into the convolutions before them.
"""
from __future__ import annotations

import numpy as np

from ..graph.ir import Graph, Value
from ..graph.simplify import fold_conv_affine
from .common import Emitter, ImportError_, unsupported


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("from_torch needs PyTorch: pip install 'looptune[torch]' (or "
                          "pip install torch)") from None
    return torch


def from_torch(module, example_inputs, *, name: str | None = None) -> Graph:
    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"from_torch needs a torch.nn.Module, got {type(module).__name__}")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    module = module.eval()
    try:
        with torch.no_grad():
            ep = torch.export.export(module, example_inputs)
    except Exception as e:  # noqa: BLE001 - torch's many export errors, one message
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ImportError_(f"torch.export cannot export {type(module).__name__} at the example "
                           f"inputs' shapes ({type(e).__name__}: {first}); looptune imports "
                           "modules that torch.export can trace: static shapes, no control "
                           "flow on tensor values, example inputs the module accepts") from None
    return _Importer(ep, name or type(module).__name__).run()


def _np(t) -> np.ndarray:
    a = t.detach().cpu().contiguous().numpy()
    return a.astype(np.float32) if a.dtype == np.float64 else a


class _Importer:
    def __init__(self, ep, name: str):
        self.ep = ep
        self.e = Emitter(name)
        self.env: dict = {}

    # ------------------------------------------------------------------ driver
    def run(self) -> Graph:
        sig = self.ep.graph_signature
        consts = {**sig.inputs_to_parameters, **sig.inputs_to_buffers,
                  **getattr(sig, "inputs_to_lifted_tensor_constants", {})}
        tensors = {**self.ep.state_dict, **getattr(self.ep, "constants", {})}
        outputs = []
        for node in self.ep.graph.nodes:
            if node.op == "placeholder":
                if node.name in consts:
                    self.env[node.name] = self.e.const(node.name, _np(tensors[consts[node.name]]))
                else:
                    meta = node.meta["val"]
                    dtype = str(meta.dtype).replace("torch.", "")
                    if dtype == "int64":
                        dtype = "int32"  # indices: the kernels read 32-bit ints
                    self.env[node.name] = self.e.g.input(node.name, tuple(meta.shape), dtype)
            elif node.op == "call_function":
                self.env[node.name] = self.call(node)
            elif node.op == "output":
                outputs = [self.arg(a) for a in node.args[0]]
        graph = self.e.g.finish(*outputs)
        return fold_conv_affine(graph)

    def arg(self, a):
        import torch.fx as fx
        if isinstance(a, fx.Node):
            return self.env[a.name]
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        return a

    def call(self, node) -> Value:
        key = str(node.target).replace("aten.", "", 1)
        handler = _HANDLERS.get(key)
        if handler is None:
            raise unsupported("PyTorch", str(node.target), node.name, _HANDLERS)
        args = [self.arg(a) for a in node.args]
        kwargs = {k: self.arg(v) for k, v in node.kwargs.items()}
        try:
            return handler(self.e, node.name, *args, **kwargs)
        except ImportError_:
            raise
        except TypeError as e:
            raise ImportError_(f"PyTorch operator {node.target} (node {node.name}): {e}") from None


# ---------------------------------------------------------------------- translations
_HANDLERS: dict = {}


def _on(*keys):
    def deco(fn):
        for k in keys:
            _HANDLERS[k] = fn
        return fn
    return deco


def _pair(v):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return (int(v[0]), int(v[-1]))


@_on("conv2d.default")
def _conv(e, name, x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    if isinstance(padding, str):
        raise ImportError_(f"node {name}: padding={padding!r} is not supported; give the "
                           "padding as numbers")
    y = e.op("conv2d", x, w, name=name, stride=_pair(stride), padding=_pair(padding),
             dilation=_pair(dilation), groups=int(groups))
    if b is not None:
        y = e.op("add", y, e.reshape(b, (1, b.shape[0], 1, 1)), name=name + "_bias")
    return y


@_on("convolution.default")
def _convolution(e, name, x, w, b, stride, padding, dilation, transposed, output_padding,
                 groups):
    if transposed:
        raise ImportError_(f"node {name}: transposed convolution is not supported")
    return _conv(e, name, x, w, b, stride, padding, dilation, groups)


@_on("batch_norm.default", "_native_batch_norm_legit_no_training.default")
def _batch_norm(e, name, x, weight, bias, mean, var, *rest):
    training = rest[0] if len(rest) >= 3 else False
    eps = rest[-2] if len(rest) >= 3 else rest[-1]
    if training:
        raise ImportError_(f"node {name}: batch norm in training mode; call model.eval()")
    k = x.shape[1]
    w = weight.data if weight is not None else np.ones(k, np.float32)
    b = bias.data if bias is not None else np.zeros(k, np.float32)
    scale = w / np.sqrt(var.data.astype(np.float64) + eps)
    return e.channel_affine(x, scale, b - mean.data * scale, name)


def _unary(op):
    return lambda e, name, x, **kw: e.op(op, x, name=name)


for _k, _op in {"relu.default": "relu", "sigmoid.default": "sigmoid", "silu.default": "silu",
                "tanh.default": "tanh", "exp.default": "exp", "sqrt.default": "sqrt",
                "neg.default": "neg", "relu_.default": "relu"}.items():
    _HANDLERS[_k] = _unary(_op)


@_on("gelu.default")
def _gelu(e, name, x, approximate="none"):
    return e.op("gelu", x, name=name, approximate=approximate)


def _binary(op):
    def h(e, name, a, b, alpha=1):
        if alpha != 1:
            b = e.binary("mul", b, alpha, name=name + "_alpha") if isinstance(b, Value) \
                else b * alpha
        return e.binary(op, a, b, name=name)
    return h


for _k, _op in {"add.Tensor": "add", "sub.Tensor": "sub", "mul.Tensor": "mul",
                "div.Tensor": "div", "add.Scalar": "add", "mul.Scalar": "mul",
                "sub.Scalar": "sub", "div.Scalar": "div"}.items():
    _HANDLERS[_k] = _binary(_op)


@_on("rsub.Scalar")
def _rsub(e, name, a, b, alpha=1):
    return e.binary("sub", b, a if alpha == 1 else e.binary("mul", a, alpha), name=name)


@_on("max_pool2d.default")
def _max_pool(e, name, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    if _pair(dilation) != (1, 1) or ceil_mode:
        raise ImportError_(f"node {name}: max_pool2d with dilation or ceil_mode is not supported")
    return e.op("max_pool2d", x, name=name, kernel=_pair(kernel),
                stride=_pair(stride) if stride else _pair(kernel), padding=_pair(padding))


@_on("avg_pool2d.default")
def _avg_pool(e, name, x, kernel, stride=(), padding=0, ceil_mode=False,
              count_include_pad=True, divisor_override=None):
    if ceil_mode or divisor_override is not None or (not count_include_pad and padding):
        raise ImportError_(f"node {name}: avg_pool2d with ceil_mode, divisor_override or "
                           "count_include_pad=False is not supported")
    return e.op("avg_pool2d", x, name=name, kernel=_pair(kernel),
                stride=_pair(stride) if stride else _pair(kernel), padding=_pair(padding))


@_on("mean.dim")
def _mean(e, name, x, dims, keepdim=False, dtype=None):
    return e.op("mean", x, name=name, axis=tuple(int(d) for d in dims), keepdims=bool(keepdim))


def _adaptive(e, name, x, output_size):
    oh, ow = _pair(output_size)
    H, W = x.shape[2], x.shape[3]
    if (oh, ow) == (1, 1):
        return e.op("mean", x, name=name, axis=(2, 3), keepdims=True)
    if H % oh or W % ow:
        raise ImportError_(f"node {name}: adaptive_avg_pool2d from {H}x{W} to {oh}x{ow} needs "
                           "the input size to be a multiple of the output size")
    return e.op("avg_pool2d", x, name=name, kernel=(H // oh, W // ow), stride=(H // oh, W // ow))


_HANDLERS["adaptive_avg_pool2d.default"] = _adaptive
_HANDLERS["_adaptive_avg_pool2d.default"] = _adaptive


@_on("sum.dim_IntList")
def _sum(e, name, x, dims, keepdim=False, dtype=None):
    return e.op("sum", x, name=name, axis=tuple(int(d) for d in dims), keepdims=bool(keepdim))


@_on("flatten.using_ints")
def _flatten(e, name, x, start=0, end=-1):
    nd = len(x.shape)
    start, end = start % nd, end % nd
    size = int(np.prod(x.shape[start:end + 1]))
    return e.reshape(x, x.shape[:start] + (size,) + x.shape[end + 1:], name=name)


@_on("view.default", "reshape.default", "_unsafe_view.default")
def _view(e, name, x, shape):
    shape = list(shape)
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1]))
        shape[shape.index(-1)] = int(np.prod(x.shape)) // known
    return e.reshape(x, shape, name=name)


@_on("unsqueeze.default")
def _unsqueeze(e, name, x, dim):
    dim = dim % (len(x.shape) + 1)
    return e.reshape(x, x.shape[:dim] + (1,) + x.shape[dim:], name=name)


@_on("squeeze.dim")
def _squeeze(e, name, x, dim):
    dim = dim % len(x.shape)
    return e.reshape(x, x.shape[:dim] + x.shape[dim + 1:] if x.shape[dim] == 1 else x.shape,
                     name=name)


def _transpose_value(e, name, x, perm):
    if x.is_const:
        return e.const(x.name, np.ascontiguousarray(np.transpose(x.data, perm)))
    if tuple(perm) == tuple(range(len(perm))):
        return x
    return e.op("transpose", x, name=name, perm=tuple(perm))


@_on("transpose.int")
def _transpose(e, name, x, d0, d1):
    perm = list(range(len(x.shape)))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _transpose_value(e, name, x, perm)


@_on("permute.default")
def _permute(e, name, x, dims):
    return _transpose_value(e, name, x, [d % len(x.shape) for d in dims])


@_on("t.default")
def _t(e, name, x):
    return _transpose_value(e, name, x, [1, 0])


@_on("linear.default")
def _linear(e, name, x, w, b=None):
    lead = x.shape[:-1]
    x2 = e.reshape(x, (int(np.prod(lead)), x.shape[-1]))
    y = e.op("matmul", x2, w, name=name, transpose_b=True)
    if b is not None:
        y = e.op("add", y, b, name=name + "_bias")
    return e.reshape(y, lead + (w.shape[0],))


@_on("addmm.default")
def _addmm(e, name, bias, x, w, beta=1, alpha=1):
    if beta != 1 or alpha != 1:
        raise ImportError_(f"node {name}: addmm with beta or alpha other than 1")
    return e.op("add", e.op("matmul", x, w, name=name), bias, name=name + "_bias")


@_on("matmul.default", "mm.default", "bmm.default")
def _matmul(e, name, a, b):
    return e.matmul(a, b, name)


@_on("layer_norm.default")
def _layer_norm(e, name, x, shape, w=None, b=None, eps=1e-5, cudnn=False):
    if len(shape) != 1:
        raise ImportError_(f"node {name}: layer_norm over {len(shape)} dimensions; only the last "
                           "one is supported")
    args = [x] + ([w] if w is not None else []) + ([b] if b is not None and w is not None else [])
    if b is not None and w is None:
        args = [x, e.const(name + "_gamma", np.ones(shape[0], np.float32)), b]
    return e.op("layer_norm", *args, name=name, eps=float(eps))


@_on("softmax.int", "_softmax.default")
def _softmax(e, name, x, dim, *rest):
    return e.op("softmax", x, name=name, axis=int(dim))


@_on("embedding.default")
def _embedding(e, name, w, ids, *rest):
    return e.op("embedding", w, ids, name=name)


@_on("cat.default")
def _cat(e, name, xs, dim=0):
    return e.op("concat", *xs, name=name, axis=int(dim))


@_on("slice.Tensor")
def _slice(e, name, x, dim=0, start=None, end=None, step=1):
    size = x.shape[dim]
    start = 0 if start is None else max(min(int(start), size), -size)
    end = size if end is None else max(min(int(end), size), -size)
    if (start % size if start < 0 else start) == 0 and (end % size if end < 0 else end) == size \
            and step == 1:
        return x
    return e.op("slice", x, name=name, axis=int(dim), start=start, stop=end, step=int(step))


@_on("dropout.default", "contiguous.default", "clone.default", "alias.default",
     "detach.default", "lift_fresh_copy.default")
def _identity(e, name, x, *rest, **kw):
    return x
