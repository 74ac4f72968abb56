"""The registered workloads: default shapes are layers of common models (ResNet-50,
MobileNet, BERT-base, an MNIST MLP) so that tuning them means something."""
from __future__ import annotations

from ... import te
from . import reference as ref
from .elementwise import add, gelu, relu
from .linalg import batch_matmul, dense, matmul, matmul_add
from .nn import avg_pool2d, conv2d_nchw, conv2d_nhwc, depthwise_conv2d_nchw, max_pool2d
from .norm import layer_norm, softmax
from .reduction import reduce_sum
from .registry import OpDef, register_op


def _args(fn, *specs, **kw) -> list:
    """Placeholders named and shaped by `specs`, then fn applied to them: [inputs..., output]."""
    ins = [te.placeholder(shape, name=name) for name, shape in specs]
    return [*ins, fn(*ins, **kw)]


def _out(size, k, stride, pad, dilation=1):
    return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1


def _op(name, doc, defaults, build, reference, flops):
    register_op(OpDef(name, build, reference, defaults, flops, doc))


_op("matmul", "C = A @ B, A (M, K), B (K, N)", dict(M=512, N=512, K=512),
    lambda M, N, K: _args(matmul, ("A", (M, K)), ("B", (K, N))),
    lambda a, b, **_: ref.matmul(a, b),
    lambda M, N, K: 2 * M * N * K)

_op("matmul_u8s8", "C = A @ W.T in int32, A (M, K) uint8 activations, W (N, K) int8 weights "
    "(a quantized dense layer, as VNNI takes it)", dict(M=1024, N=1024, K=1024),
    lambda M, N, K: [A := te.placeholder((M, K), "uint8", name="A"),
                     W := te.placeholder((N, K), "int8", name="W"),
                     matmul(A, W, transpose_b=True, out_dtype="int32")],
    lambda a, w, **_: (a.astype("int64") @ w.astype("int64").T).astype("int32"),
    lambda M, N, K: 2 * M * N * K)

_op("matmul_add", "D = A @ B + C (the Ansor tutorial's workload)", dict(M=512, N=512, K=512),
    lambda M, N, K: _args(matmul_add, ("A", (M, K)), ("B", (K, N)), ("C", (M, N))),
    lambda a, b, c, **_: ref.matmul_add(a, b, c),
    lambda M, N, K: 2 * M * N * K + M * N)

_op("batch_matmul", "BERT-base attention scores: 12 heads of (128 x 64) @ (64 x 128)",
    dict(batch=12, M=128, N=128, K=64),
    lambda batch, M, N, K: _args(batch_matmul, ("A", (batch, M, K)), ("B", (batch, K, N))),
    lambda a, b, **_: ref.batch_matmul(a, b),
    lambda batch, M, N, K: 2 * batch * M * N * K)

_op("dense", "MLP layer relu(X @ W + bias), MNIST 784 -> 256",
    dict(batch=1, in_features=784, out_features=256),
    lambda batch, in_features, out_features: _args(
        dense, ("X", (batch, in_features)), ("W", (in_features, out_features)),
        ("bias", (out_features,)), relu=True),
    lambda x, w, b, **_: ref.dense(x, w, b, relu=True),
    lambda batch, in_features, out_features: 2 * batch * out_features * (in_features + 1))

_CONV = dict(N=1, C=64, H=56, W=56, K=64, R=3, S=3, stride=1, pad=1, dilation=1)


def _conv_flops(N, C, H, W, K, R, S, stride, pad, dilation):
    return 2 * N * K * C * R * S * _out(H, R, stride, pad, dilation) * _out(W, S, stride, pad,
                                                                             dilation)


_op("conv2d", "ResNet-50 3x3 conv (conv2_x), NCHW", _CONV,
    lambda N, C, H, W, K, R, S, stride, pad, dilation: _args(
        conv2d_nchw, ("X", (N, C, H, W)), ("W", (K, C, R, S)), stride=stride, padding=pad,
        dilation=dilation),
    lambda x, w, stride, pad, dilation, **_: ref.conv2d_nchw(x, w, stride, pad, dilation),
    _conv_flops)

_op("conv2d_nhwc", "ResNet-50 3x3 conv (conv2_x), NHWC, W as (R, S, C, K)", _CONV,
    lambda N, C, H, W, K, R, S, stride, pad, dilation: _args(
        conv2d_nhwc, ("X", (N, H, W, C)), ("W", (R, S, C, K)), stride=stride, padding=pad,
        dilation=dilation),
    lambda x, w, stride, pad, dilation, **_: ref.conv2d_nhwc(x, w, stride, pad, dilation),
    _conv_flops)

_op("depthwise_conv2d", "MobileNet-v1 first depthwise 3x3 conv, NCHW, W as (C, 1, R, S)",
    dict(N=1, C=32, H=112, W=112, R=3, S=3, stride=1, pad=1),
    lambda N, C, H, W, R, S, stride, pad: _args(
        depthwise_conv2d_nchw, ("X", (N, C, H, W)), ("W", (C, 1, R, S)), stride=stride,
        padding=pad),
    lambda x, w, stride, pad, **_: ref.depthwise_conv2d_nchw(x, w, stride, pad),
    lambda N, C, H, W, R, S, stride, pad: 2 * N * C * R * S * _out(H, R, stride, pad)
    * _out(W, S, stride, pad))

_POOL = dict(N=1, C=64, H=112, W=112, kernel=3, stride=2, pad=1)

_op("max_pool2d", "ResNet-50 stem max pool 3x3 / 2, NCHW", _POOL,
    lambda N, C, H, W, kernel, stride, pad: _args(
        max_pool2d, ("X", (N, C, H, W)), kernel=kernel, stride=stride, padding=pad),
    lambda x, kernel, stride, pad, **_: ref.max_pool2d(x, kernel, stride, pad),
    lambda N, C, H, W, kernel, stride, pad: N * C * kernel * kernel
    * _out(H, kernel, stride, pad) * _out(W, kernel, stride, pad))

_op("avg_pool2d", "3x3 / 2 average pool (count_include_pad) on a ResNet stem shape, NCHW",
    _POOL,
    lambda N, C, H, W, kernel, stride, pad: _args(
        avg_pool2d, ("X", (N, C, H, W)), kernel=kernel, stride=stride, padding=pad),
    lambda x, kernel, stride, pad, **_: ref.avg_pool2d(x, kernel, stride, pad),
    lambda N, C, H, W, kernel, stride, pad: N * C * (kernel * kernel + 1)
    * _out(H, kernel, stride, pad) * _out(W, kernel, stride, pad))

_op("softmax", "BERT-base attention softmax: 12 heads x 128 queries rows of 128 keys",
    dict(M=1536, N=128),
    lambda M, N: _args(softmax, ("X", (M, N))),
    lambda x, **_: ref.softmax(x),
    lambda M, N: 7 * M * N)  # max 1; sub, exp, add 3; sub, exp, div 3

_op("layer_norm", "BERT-base layer norm: 128 tokens x 768 hidden", dict(M=128, N=768),
    lambda M, N: _args(layer_norm, ("X", (M, N)), ("gamma", (N,)), ("beta", (N,))),
    lambda x, g, b, **_: ref.layer_norm(x, g, b),
    lambda M, N: 10 * M * N + 2 * M)  # mean 2, var 4, normalize 4; rsqrt + eps per row

_op("relu", "ResNet-50 activation after conv2_x", dict(N=1, C=64, H=56, W=56),
    lambda N, C, H, W: _args(relu, ("X", (N, C, H, W))),
    lambda x, **_: ref.relu(x),
    lambda N, C, H, W: N * C * H * W)

_op("gelu", "BERT-base FFN activation: 128 tokens x 3072", dict(M=128, N=3072),
    lambda M, N: _args(gelu, ("X", (M, N))),
    lambda x, **_: ref.gelu(x),
    lambda M, N: 5 * M * N)  # mul, erf, add, mul, mul

_op("add", "broadcast bias add: X (N, C, H, W) + B (C, 1, 1)", dict(N=1, C=64, H=56, W=56),
    lambda N, C, H, W: _args(add, ("A", (N, C, H, W)), ("B", (C, 1, 1))),
    lambda a, b, **_: ref.add(a, b),
    lambda N, C, H, W: N * C * H * W)

_op("reduce_sum", "row sums of an (M, N) matrix", dict(M=1024, N=1024),
    lambda M, N: _args(reduce_sum, ("X", (M, N)), axis=-1),
    lambda x, **_: ref.reduce_sum(x, axis=-1),
    lambda M, N: M * N)
