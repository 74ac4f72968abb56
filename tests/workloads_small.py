"""Small shapes for every registered operator (chosen so small tile factors rarely divide),
and random inputs for them."""
from __future__ import annotations

import zlib

import numpy as np

from looptune import te
from looptune.te.ops import OPS, workload

SMALL = {
    "matmul": dict(M=13, N=17, K=9),
    "matmul_add": dict(M=12, N=10, K=7),
    "batch_matmul": dict(batch=2, M=5, N=7, K=6),
    "dense": dict(batch=3, in_features=11, out_features=9),
    "conv2d": dict(N=1, C=3, H=7, W=6, K=4, R=3, S=3, stride=1, pad=1, dilation=1),
    "conv2d_nhwc": dict(N=1, C=3, H=6, W=7, K=5, R=3, S=3, stride=2, pad=1, dilation=1),
    "depthwise_conv2d": dict(N=1, C=3, H=7, W=9, R=3, S=3, stride=1, pad=1),
    "max_pool2d": dict(N=1, C=2, H=9, W=7, kernel=3, stride=2, pad=1),
    "avg_pool2d": dict(N=1, C=2, H=9, W=7, kernel=3, stride=2, pad=1),
    "softmax": dict(M=5, N=11),
    "layer_norm": dict(M=4, N=13),
    "relu": dict(N=1, C=2, H=5, W=7),
    "gelu": dict(M=6, N=9),
    "add": dict(N=1, C=3, H=4, W=5),
    "reduce_sum": dict(M=7, N=13),
    "matmul_u8s8": dict(M=6, N=32, K=8),
}


def small_workload(name: str):
    """(PrimFunc, input arrays, expected output, output shape/dtype) for `name`."""
    tensors, reference, _ = workload(name, **SMALL[name])
    func = te.create_prim_func(tensors)
    rng = np.random.default_rng(zlib.crc32(name.encode()))  # the same in every process
    inputs = [rng.integers(np.iinfo(t.dtype).min, np.iinfo(t.dtype).max, t.shape,
                           endpoint=True).astype(t.dtype)
              if np.issubdtype(np.dtype(t.dtype), np.integer)
              else rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in tensors[:-1]]
    expected = np.asarray(reference(*inputs))
    out = tensors[-1]
    return func, inputs, expected, (out.shape, out.dtype)


def all_names():
    return sorted(OPS)
