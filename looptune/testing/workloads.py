"""Random small workloads for differential testing, each with a numpy reference.

A workload is described by a JSON-ready spec `{"family": name, "params": {...}}`:
`random_spec(rng)` draws one, `build(spec)` turns it into a PrimFunc plus a reference, so a
failure found by the fuzzer is replayed from its spec alone. Sizes are small and odd, so
that random tile sizes rarely divide them (guards) and the interpreter stays fast."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import te
from ..te import ops
from ..te.ops import reference as ref
from ..tir import dtype as dt
from ..tir.func import PrimFunc

SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 15, 16, 17, 19, 23)


@dataclass
class Workload:
    """A random workload built from its spec: the PrimFunc and its numpy reference."""

    spec: dict
    func: PrimFunc
    reference: Callable  # reference(*input_arrays) -> expected output (numpy)

    @property
    def output(self):
        return self.func.params[-1]

    def inputs(self, seed: int) -> list:
        """Random inputs, never zero (a lost term or a read of the wrong element must change
        the answer): floats of magnitude 0.5..1.5 with either sign, integers +-1..8."""
        rng = np.random.default_rng(seed)
        out = []
        for b in self.func.params[:-1]:
            sign = rng.choice(np.array([-1, 1]), b.shape)
            if dt.is_float(b.dtype):
                x = sign * rng.uniform(0.5, 1.5, b.shape)
            else:
                x = sign * rng.integers(1, 9, b.shape)
            out.append(np.ascontiguousarray(x.astype(dt.numpy_name(b.dtype))))
        return out

    def expected(self, inputs) -> np.ndarray:
        out = self.output
        want = np.asarray(self.reference(*inputs)).astype(dt.numpy_name(out.dtype))
        return want.reshape(out.shape)


def _size(rng, hi: int = 23) -> int:
    return rng.choice([s for s in SIZES if s <= hi])


def _shape(rng, ndim: int, budget: int = 400) -> list:
    """A shape of `ndim` small sizes with at most about `budget` elements."""
    while True:
        shape = [_size(rng, 17 if ndim <= 2 else 7) for _ in range(ndim)]
        if math.prod(shape) <= budget:
            return shape


# ------------------------------------------------------------------------------ families
# Each family: spec(rng) -> params, and make(**params) -> (tensors [inputs..., output],
# reference). Parameters are plain ints, strings, bools and lists (JSON).

def _spec_matmul(rng):
    return dict(M=_size(rng), N=_size(rng), K=_size(rng), ta=rng.random() < 0.25,
                tb=rng.random() < 0.25, epilogue=rng.choice(["none", "none", "bias_relu", "add"]))


def _make_matmul(M, N, K, ta, tb, epilogue):
    A = te.placeholder((K, M) if ta else (M, K), name="A")
    B = te.placeholder((N, K) if tb else (K, N), name="B")
    C = ops.matmul(A, B, transpose_a=ta, transpose_b=tb)
    if epilogue == "bias_relu":
        bias = te.placeholder((N,), name="bias")
        out = ops.relu(ops.add(C, bias, name="bias_add"))
        return [A, B, bias, out], lambda a, b, c: ref.relu(ref.add(ref.matmul(a, b, ta, tb), c))
    if epilogue == "add":
        D = te.placeholder((M, 1), name="D")
        out = ops.add(C, D, name="out")
        return [A, B, D, out], lambda a, b, d: ref.add(ref.matmul(a, b, ta, tb), d)
    return [A, B, C], lambda a, b: ref.matmul(a, b, ta, tb)


def _spec_batch_matmul(rng):
    batch = rng.choice([1, 2, 3])
    ba, bb = rng.choice([(batch, batch), (batch, batch), (1, batch), (batch, 1)])
    return dict(ba=ba, bb=bb, M=_size(rng, 9), N=_size(rng, 9), K=_size(rng, 9))


def _make_batch_matmul(ba, bb, M, N, K):
    A = te.placeholder((ba, M, K), name="A")
    B = te.placeholder((bb, K, N), name="B")
    return [A, B, ops.batch_matmul(A, B)], ref.batch_matmul


def _window(rng, size_hi=9):
    """(size, kernel, stride, pad, dilation) with a window that fits the padded input."""
    while True:
        size, k = _size(rng, size_hi), rng.choice([1, 2, 3])
        stride, pad, dil = rng.choice([1, 1, 2, 3]), rng.choice([0, 0, 1, 2]), rng.choice([1, 1, 2])
        if size + 2 * pad >= dil * (k - 1) + 1:
            return size, k, stride, pad, dil


def _spec_conv2d(rng):
    H, R, sh, pad, dil = _window(rng)
    W, S, sw, _, _ = _window(rng)
    while W + 2 * pad < dil * (S - 1) + 1:
        W += 1
    return dict(layout=rng.choice(["NCHW", "NHWC"]), N=rng.choice([1, 1, 2]),
                C=rng.choice([1, 2, 3, 4]), H=H, W=W, K=rng.choice([1, 2, 3, 5]), R=R, S=S,
                stride=[sh, sw], pad=pad, dilation=dil)


def _make_conv2d(layout, N, C, H, W, K, R, S, stride, pad, dilation):
    stride = tuple(stride)
    if layout == "NCHW":
        X, Wt = te.placeholder((N, C, H, W), name="X"), te.placeholder((K, C, R, S), name="W")
        out = ops.conv2d_nchw(X, Wt, stride=stride, padding=pad, dilation=dilation)
        return [X, Wt, out], lambda x, w: ref.conv2d_nchw(x, w, stride, pad, dilation)
    X, Wt = te.placeholder((N, H, W, C), name="X"), te.placeholder((R, S, C, K), name="W")
    out = ops.conv2d_nhwc(X, Wt, stride=stride, padding=pad, dilation=dilation)
    return [X, Wt, out], lambda x, w: ref.conv2d_nhwc(x, w, stride, pad, dilation)


def _spec_depthwise(rng):
    H, R, stride, pad, dil = _window(rng)
    W = H + rng.choice([0, 1, 2])
    return dict(N=1, C=rng.choice([1, 2, 3, 4]), M=rng.choice([1, 1, 2]), H=H, W=W, R=R,
                S=R, stride=stride, pad=pad, dilation=dil)


def _make_depthwise(N, C, M, H, W, R, S, stride, pad, dilation):
    X, Wt = te.placeholder((N, C, H, W), name="X"), te.placeholder((C, M, R, S), name="W")
    out = ops.depthwise_conv2d_nchw(X, Wt, stride=stride, padding=pad, dilation=dilation)
    return [X, Wt, out], lambda x, w: ref.depthwise_conv2d_nchw(x, w, stride, pad, dilation)


def _spec_pool(rng):
    kh, kw = rng.choice([1, 2, 3]), rng.choice([1, 2, 3])
    return dict(kind=rng.choice(["max", "avg"]), N=1, C=rng.choice([1, 2, 3]),
                H=_size(rng, 11) + 2, W=_size(rng, 11) + 2, kernel=[kh, kw],
                stride=[rng.choice([1, 2, 3]), rng.choice([1, 2])],
                pad=[rng.randint(0, kh // 2), rng.randint(0, kw // 2)])


def _make_pool(kind, N, C, H, W, kernel, stride, pad):
    X = te.placeholder((N, C, H, W), name="X")
    kernel, stride, pad = tuple(kernel), tuple(stride), tuple(pad)
    op, rf = (ops.max_pool2d, ref.max_pool2d) if kind == "max" else (ops.avg_pool2d,
                                                                     ref.avg_pool2d)
    return [X, op(X, kernel, stride, pad)], lambda x: rf(x, kernel, stride, pad)


def _spec_softmax(rng):
    ndim = rng.choice([1, 2, 2, 3])
    return dict(shape=_shape(rng, ndim), axis=rng.randrange(-ndim, ndim))


def _make_softmax(shape, axis):
    X = te.placeholder(tuple(shape), name="X")
    return [X, ops.softmax(X, axis=axis)], lambda x: ref.softmax(x, axis=axis)


def _spec_layer_norm(rng):
    return dict(shape=_shape(rng, rng.choice([1, 2, 2, 3])), gamma=rng.random() < 0.7,
                beta=rng.random() < 0.7)


def _make_layer_norm(shape, gamma, beta):
    X = te.placeholder(tuple(shape), name="X")
    g = te.placeholder((shape[-1],), name="gamma") if gamma else None
    b = te.placeholder((shape[-1],), name="beta") if beta else None
    args = [t for t in (X, g, b) if t is not None]

    def reference(x, *gb):
        it = iter(gb)
        return ref.layer_norm(x, next(it) if gamma else None, next(it) if beta else None)

    return [*args, ops.layer_norm(X, g, b)], reference


def _spec_reduce(rng):
    ndim = rng.choice([1, 2, 3, 4])
    axes = sorted(rng.sample(range(ndim), rng.randint(1, ndim)))
    return dict(op=rng.choice(["sum", "max", "min", "mean"]), shape=_shape(rng, ndim),
                axis=None if rng.random() < 0.15 else axes, keepdims=rng.random() < 0.4,
                dtype=rng.choice(["float32"] * 5 + ["float64", "int32"]))


def _make_reduce(op, shape, axis, keepdims, dtype):
    if op == "mean" and dtype == "int32":
        dtype = "float32"
    X = te.placeholder(tuple(shape), dtype=dtype, name="X")
    ax = None if axis is None else tuple(axis)
    out = getattr(ops, f"reduce_{op}")(X, axis=ax, keepdims=keepdims)
    return [X, out], lambda x: getattr(ref, f"reduce_{op}")(x, axis=ax, keepdims=keepdims)


# elementwise chains: each stage maps the running value y (and maybe one new, broadcasting
# input) to the next, both in te and numpy
_UNARY = {
    "relu": (lambda y, k: ops.relu(y, name=f"relu{k}"), ref.relu),
    "gelu": (lambda y, k: ops.gelu(y, name=f"gelu{k}"), ref.gelu),
    "tanh": (lambda y, k: te.compute(y.shape, lambda *i: te.tanh(y[i]), name=f"tanh{k}"),
             np.tanh),
    "sigmoid": (lambda y, k: te.compute(y.shape, lambda *i: te.sigmoid(y[i]), name=f"sig{k}"),
                lambda x: 1 / (1 + np.exp(-x))),
    "scale": (lambda y, k: ops.multiply(y, 0.75, name=f"scale{k}"), lambda x: x * 0.75),
    "shift": (lambda y, k: ops.add(y, 1, name=f"shift{k}"), lambda x: x + 1),
}
_BINARY = {"add": (ops.add, np.add), "mul": (ops.multiply, np.multiply)}
_INT_OK = {"relu", "shift", "add", "mul"}


def _broadcast_shape_of(rng, shape: list) -> list:
    """A shape that broadcasts to `shape`: some dims 1, maybe fewer leading dims."""
    out = [1 if rng.random() < 0.5 else s for s in shape]
    return out[rng.randint(0, len(out) - 1):] if rng.random() < 0.3 else out


def _spec_elementwise(rng):
    ndim = rng.choice([1, 2, 3, 4])
    shape = _shape(rng, ndim)
    dtype = rng.choice(["float32"] * 5 + ["float64", "int32"])
    names = sorted(_UNARY) + sorted(_BINARY) * 2
    if dtype == "int32":
        names = [n for n in names if n in _INT_OK]
    stages = []
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(names)
        stages.append([kind, _broadcast_shape_of(rng, shape)] if kind in _BINARY else [kind])
    if rng.random() < 0.3:  # the first input itself broadcast against a later one
        stages.insert(0, ["add", shape])
        shape = _broadcast_shape_of(rng, shape)
    return dict(shape=shape, dtype=dtype, stages=stages)


def _make_elementwise(shape, dtype, stages):
    X = te.placeholder(tuple(shape), dtype=dtype, name="X")
    inputs, y = [X], X
    for k, st in enumerate(stages):
        if st[0] in _BINARY:
            B = te.placeholder(tuple(st[1]), dtype=dtype, name=f"B{k}")
            inputs.append(B)
            y = _BINARY[st[0]][0](y, B, name=f"{st[0]}{k}")
        else:
            y = _UNARY[st[0]][0](y, k)

    def reference(x, *bs):
        it, v = iter(bs), x.astype(np.float64)
        for st in stages:
            v = _BINARY[st[0]][1](v, next(it)) if st[0] in _BINARY else _UNARY[st[0]][1](v)
        return v

    return [*inputs, y], reference


def _spec_normalize(rng):
    """x - mean(x) (a reduction consumed by a broadcasting elementwise stage)."""
    return dict(shape=_shape(rng, rng.choice([2, 3])), axis=rng.choice([-1, 0]))


def _make_normalize(shape, axis):
    X = te.placeholder(tuple(shape), name="X")
    m = ops.reduce_mean(X, axis=axis, keepdims=True, name="mean")

    def body(*i):
        return X[i] - m[tuple(0 if s == 1 else v for s, v in zip(m.shape, i))]

    out = te.compute(X.shape, body, name="centered")
    return [X, out], lambda x: x - x.astype(np.float64).mean(axis=axis, keepdims=True)


def _spec_pad(rng):
    ndim = rng.choice([1, 2, 3])
    return dict(shape=_shape(rng, ndim), before=[rng.randint(0, 2) for _ in range(ndim)],
                after=[rng.randint(0, 2) for _ in range(ndim)])


def _make_pad(shape, before, after):
    X = te.placeholder(tuple(shape), name="X")
    P = ops.pad(X, list(before), list(after), value=0.5)
    out = ops.relu(ops.multiply(P, -1.0, name="neg"))
    return [X, out], lambda x: np.maximum(-np.pad(x.astype(np.float64), list(zip(before, after)),
                                                  constant_values=0.5), 0)


FAMILIES = {
    "matmul": (_spec_matmul, _make_matmul, 4),
    "batch_matmul": (_spec_batch_matmul, _make_batch_matmul, 2),
    "conv2d": (_spec_conv2d, _make_conv2d, 4),
    "depthwise": (_spec_depthwise, _make_depthwise, 2),
    "pool": (_spec_pool, _make_pool, 2),
    "softmax": (_spec_softmax, _make_softmax, 2),
    "layer_norm": (_spec_layer_norm, _make_layer_norm, 2),
    "reduce": (_spec_reduce, _make_reduce, 3),
    "elementwise": (_spec_elementwise, _make_elementwise, 4),
    "normalize": (_spec_normalize, _make_normalize, 1),
    "pad": (_spec_pad, _make_pad, 1),
}


def random_spec(rng, families=None) -> dict:
    """A random workload spec (`rng` a random.Random), from `families` (default: all)."""
    names = sorted(families or FAMILIES)
    family = rng.choices(names, weights=[FAMILIES[n][2] for n in names])[0]
    return {"family": family, "params": FAMILIES[family][0](rng)}


def build(spec: dict) -> Workload:
    make = FAMILIES[spec["family"]][1]
    tensors, reference = make(**spec["params"])
    return Workload(spec, te.create_prim_func(tensors), reference)
