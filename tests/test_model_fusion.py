"""Fusion on real model blocks, imported from torch: a ResNet basic block and a BERT encoder
layer make the kernels a person would write by hand."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from looptune.frontend.torch import from_torch  # noqa: E402
from looptune.graph import evaluate, extract_tasks  # noqa: E402
from looptune.graph.fuse import fuse  # noqa: E402
from looptune.graph.simplify import prepare  # noqa: E402


sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from models import Block, EncoderLayer  # noqa: E402  (the benchmark's models, written in torch)


def Encoder():
    return EncoderLayer(hidden=32, heads=2, ffn=64)


def groups_of(model, *inputs):
    graph = prepare(from_torch(model.eval(), inputs))
    with torch.no_grad():
        want = model(*inputs).numpy()
    np.testing.assert_allclose(evaluate(graph, *[x.numpy() for x in inputs])[0], want,
                               rtol=1e-4, atol=1e-4)
    return graph, [g.name for g in fuse(graph)]


def test_resnet_block_fuses_batch_norms_activations_and_the_shortcut():
    _, names = groups_of(Block(8, 16, 2), torch.randn(1, 8, 16, 16))
    # activations stay channels-last between the convolutions; the block's output goes back
    # to NCHW once, for the caller
    assert names == ["fused_conv2d_add_relu", "fused_conv2d_add",
                     "fused_conv2d_add_add_relu", "fused_transpose"]
    _, names = groups_of(Block(8, 8, 1), torch.randn(1, 8, 16, 16))
    assert names == ["fused_conv2d_add_relu", "fused_transpose", "fused_conv2d_add_add_relu",
                     "fused_transpose"]  # the shortcut joins in NHWC


def test_bert_layer_fuses_bias_scale_gelu_and_residuals():
    graph, names = groups_of(Encoder(), torch.randn(1, 16, 32))
    assert names == [
        "fused_matmul_add",                             # q, k, v = x [Wq Wk Wv] + b at once
        "fused_slice_reshape_transpose",                # k to heads and transposed at once
        "fused_slice_reshape_transpose_reshape_batch_matmul_mul",  # q (per head) k^T / sqrt(d)
        "fused_softmax",
        "fused_slice_reshape_transpose_reshape_batch_matmul",  # att v (v read per head)
        "fused_transpose_reshape_matmul_add_add",       # back to tokens as the out
        "fused_layer_norm",                             # projection reads it, + residual; norm
        "fused_matmul_add_gelu",                        # FFN up
        "fused_matmul_add_add", "fused_layer_norm",     # FFN down + residual, norm
    ]
    tasks = {t.task_name: t.weight for t in extract_tasks(graph)}
    assert tasks["fused_matmul_add"] == 1           # q, k and v: one kernel
    assert tasks["fused_layer_norm"] == 2
