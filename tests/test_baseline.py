"""The library baselines compute what the operators compute (they are what benchmarks and
`looptune tune` compare against)."""
from __future__ import annotations

import numpy as np
import pytest

from looptune.te.ops import OPS, workload
from looptune.te.ops.baseline import baseline

SMALL = {"matmul": dict(M=8, N=12, K=5), "matmul_add": dict(M=8, N=12, K=5),
         "batch_matmul": dict(batch=2, M=4, N=6, K=3),
         "dense": dict(batch=2, in_features=7, out_features=5),
         "conv2d": dict(N=1, C=3, H=6, W=6, K=4, R=3, S=3, stride=1, pad=1, dilation=1),
         "depthwise_conv2d": dict(N=1, C=3, H=6, W=6, R=3, S=3, stride=1, pad=1),
         "max_pool2d": dict(N=1, C=2, H=6, W=6, kernel=3, stride=2, pad=1),
         "avg_pool2d": dict(N=1, C=2, H=6, W=6, kernel=3, stride=2, pad=1),
         "softmax": dict(M=4, N=9), "relu": dict(N=1, C=2, H=3, W=3),
         "add": dict(N=1, C=2, H=3, W=3), "reduce_sum": dict(M=4, N=7)}
TORCH_BASELINES = {"conv2d", "depthwise_conv2d", "max_pool2d", "avg_pool2d"}  # the rest: numpy


@pytest.mark.parametrize("name", sorted(SMALL))
def test_baseline_matches_the_reference(name):
    if name in TORCH_BASELINES:
        pytest.importorskip("torch")
    tensors, ref, _ = workload(name, **SMALL[name])
    rng = np.random.default_rng(0)
    ins = [rng.uniform(-1, 1, t.shape).astype("float32") for t in tensors[:-1]]
    found = baseline(name, ins, {**OPS[name].defaults, **SMALL[name]})
    assert found is not None, f"no library baseline for {name}"
    label, fn = found
    assert label == ("torch" if name in TORCH_BASELINES else "numpy")
    got = np.asarray(fn())
    np.testing.assert_allclose(got.reshape(tensors[-1].shape), ref(*ins, **SMALL[name]),
                               rtol=1e-4, atol=1e-5)
