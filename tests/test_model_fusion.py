"""Fusion on real model blocks, imported from torch: a ResNet basic block and a BERT encoder
layer make the kernels a person would write by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from looptune.frontend.torch import from_torch  # noqa: E402
from looptune.graph import evaluate, extract_tasks  # noqa: E402
from looptune.graph.fuse import fuse  # noqa: E402
from looptune.graph.simplify import prepare  # noqa: E402


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                  nn.BatchNorm2d(cout)) if stride != 1 or cin != cout else None

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class Encoder(nn.Module):
    def __init__(self, hidden=32, heads=2, ffn=64):
        super().__init__()
        self.heads, self.d = heads, hidden // heads
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.f1, self.f2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def forward(self, x):
        b, s, h = x.shape

        def split(t):
            return t.view(b, s, self.heads, self.d).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = torch.softmax(q @ k.transpose(-1, -2) * (1 / math.sqrt(self.d)), dim=-1)
        ctx = (att @ v).transpose(1, 2).reshape(b, s, h)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.f2(nn.functional.gelu(self.f1(x))))


def groups_of(model, *inputs):
    graph = prepare(from_torch(model.eval(), inputs))
    with torch.no_grad():
        want = model(*inputs).numpy()
    np.testing.assert_allclose(evaluate(graph, *[x.numpy() for x in inputs])[0], want,
                               rtol=1e-4, atol=1e-4)
    return graph, [g.name for g in fuse(graph)]


def test_resnet_block_fuses_batch_norms_activations_and_the_shortcut():
    _, names = groups_of(Block(8, 16, 2), torch.randn(1, 8, 16, 16))
    assert names == ["fused_conv2d_add_relu", "fused_conv2d_add",
                     "fused_conv2d_add_add_relu"]
    _, names = groups_of(Block(8, 8, 1), torch.randn(1, 8, 16, 16))
    assert names == ["fused_conv2d_add_relu", "fused_conv2d_add_add_relu"]


def test_bert_layer_fuses_bias_scale_gelu_and_residuals():
    graph, names = groups_of(Encoder(), torch.randn(1, 16, 32))
    assert names == [
        "fused_matmul_add", "fused_transpose",          # q = x Wq + b, to heads
        "fused_matmul_add", "fused_matmul_add",         # k, v
        "fused_transpose", "fused_transpose",           # k to heads and transposed at once; v
        "fused_batch_matmul_mul",                       # q k^T / sqrt(d)
        "fused_softmax",
        "fused_batch_matmul", "fused_transpose",        # att v, back to tokens
        "fused_matmul_add_add", "fused_layer_norm",     # out projection + residual, norm
        "fused_matmul_add_gelu",                        # FFN up
        "fused_matmul_add_add", "fused_layer_norm",     # FFN down + residual, norm
    ]
    tasks = {t.task_name: t.weight for t in extract_tasks(graph)}
    assert tasks["fused_matmul_add"] == 3           # q, k and v: one task
    assert tasks["fused_layer_norm"] == 2
