"""The PyTorch importer: every supported operator matches torch on random inputs, through
the graph's numpy reference and (with a C compiler) through its fused kernels."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from looptune.frontend.common import ImportError_  # noqa: E402
from looptune.frontend.torch import from_torch  # noqa: E402
from looptune.graph import evaluate  # noqa: E402
from looptune.graph.fuse import fuse  # noqa: E402

torch.manual_seed(0)


class Fn(nn.Module):
    def __init__(self, fn, *mods):
        super().__init__()
        self.fn = fn
        self.mods = nn.ModuleList(mods)

    def forward(self, *xs):
        return self.fn(self, *xs)


def bn(c):
    m = nn.BatchNorm2d(c)
    with torch.no_grad():  # non-trivial running statistics
        m.running_mean.uniform_(-0.5, 0.5)
        m.running_var.uniform_(0.5, 2.0)
        m.weight.uniform_(0.5, 1.5)
        m.bias.uniform_(-0.5, 0.5)
    return m


def x4(c=4, hw=8):
    return (torch.randn(1, c, hw, hw),)


CASES = {
    "conv2d": (Fn(lambda s, x: s.mods[0](x), nn.Conv2d(4, 6, 3, padding=1)), x4()),
    "conv2d_stride_dilation": (Fn(lambda s, x: s.mods[0](x),
                                  nn.Conv2d(4, 6, 3, stride=2, padding=2, dilation=2,
                                            bias=False)), x4()),
    "conv2d_depthwise": (Fn(lambda s, x: s.mods[0](x), nn.Conv2d(4, 4, 3, padding=1, groups=4)),
                         x4()),
    "conv2d_groups": (Fn(lambda s, x: s.mods[0](x), nn.Conv2d(4, 6, 1, groups=2)), x4()),
    "conv_bn_relu": (Fn(lambda s, x: F.relu(s.mods[1](s.mods[0](x))),
                        nn.Conv2d(4, 6, 3, padding=1, bias=False), bn(6)), x4()),
    "batch_norm_alone": (Fn(lambda s, x: s.mods[0](x), bn(4)), x4()),
    "linear": (Fn(lambda s, x: s.mods[0](x), nn.Linear(16, 8)), (torch.randn(2, 16),)),
    "linear_3d": (Fn(lambda s, x: s.mods[0](x), nn.Linear(16, 8)), (torch.randn(2, 5, 16),)),
    "matmul_4d": (Fn(lambda s, a, b: a @ b), (torch.randn(1, 2, 5, 8), torch.randn(1, 2, 8, 3))),
    "bmm": (Fn(lambda s, a, b: torch.bmm(a, b)), (torch.randn(3, 5, 8), torch.randn(3, 8, 2))),
    "activations": (Fn(lambda s, x: F.relu(x) + F.gelu(x) + F.silu(x) + torch.sigmoid(x)
                       + torch.tanh(x) + F.gelu(x, approximate="tanh")), (torch.randn(3, 7),)),
    "arith_broadcast": (Fn(lambda s, a, b: (a + b) * (a - b) / (b * b + 1.0) - 2.0 * a + 1.0),
                        (torch.randn(2, 3, 4), torch.randn(3, 1))),
    "rsub_and_scalars": (Fn(lambda s, x: 1.0 - x * 3.0 + x / 2.0), (torch.randn(4, 4),)),
    "max_pool": (Fn(lambda s, x: F.max_pool2d(x, 3, 2, 1)), x4()),
    "avg_pool": (Fn(lambda s, x: F.avg_pool2d(x, 2)), x4()),
    "adaptive_avg_pool": (Fn(lambda s, x: F.adaptive_avg_pool2d(x, 1).flatten(1)
                             + F.adaptive_avg_pool2d(x, 2).flatten(1)[:, :4]), x4()),
    "shape_ops": (Fn(lambda s, x: torch.cat([x.view(4, 6).transpose(0, 1),
                                             x.reshape(6, 4) * 2], 1)[1:5, 2:7]
                     .permute(1, 0).unsqueeze(0).flatten(1)), (torch.randn(2, 3, 4),)),
    "softmax": (Fn(lambda s, x: torch.softmax(x, dim=-1) + torch.softmax(x, dim=0)),
                (torch.randn(4, 9),)),
    "layer_norm": (Fn(lambda s, x: s.mods[0](x), nn.LayerNorm(12)), (torch.randn(2, 5, 12),)),
    "embedding_mean": (Fn(lambda s, ids: s.mods[0](ids).mean(dim=1), nn.Embedding(20, 6)),
                       (torch.tensor([[1, 5, 19], [0, 2, 2]]),)),
    "mean_sum": (Fn(lambda s, x: x.mean(dim=(2, 3)) + x.sum(dim=2).mean(dim=-1)), x4()),
    "dropout_eval": (Fn(lambda s, x: s.mods[0](x) * 2, nn.Dropout(0.5)), (torch.randn(3, 3),)),
}


def expected_and_inputs(model, inputs):
    model.eval()
    with torch.no_grad():
        want = model(*inputs)
    want = [want] if isinstance(want, torch.Tensor) else list(want)
    arrays = [x.numpy().astype("int32") if x.dtype == torch.int64 else x.numpy() for x in inputs]
    return [w.numpy() for w in want], arrays


@pytest.mark.parametrize("case", sorted(CASES))
def test_imported_operators_match_torch(case):
    model, inputs = CASES[case]
    graph = from_torch(model, inputs)
    want, arrays = expected_and_inputs(model, inputs)
    for got, w in zip(evaluate(graph, *arrays), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)


@pytest.mark.cc
@pytest.mark.parametrize("case", sorted(CASES))
def test_imported_operators_run_as_kernels(case):
    from test_graph import run_kernels
    model, inputs = CASES[case]
    graph = from_torch(model, inputs)
    want, arrays = expected_and_inputs(model, inputs)
    for got, w in zip(run_kernels(graph, *arrays), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-3, atol=1e-4)


def test_batch_norm_folds_into_the_convolution():
    model, inputs = CASES["conv_bn_relu"]
    graph = from_torch(model, inputs)
    assert [n.op for n in graph.nodes] == ["conv2d", "add", "relu"]
    assert [g.name for g in fuse(graph)] == ["fused_conv2d_add_relu"]


def test_an_unsupported_operator_is_named_with_its_node():
    model = Fn(lambda s, x: torch.cumsum(x, dim=0))
    with pytest.raises(ImportError_, match=r"PyTorch operator aten\.cumsum\.default \(node "
                                           r"cumsum\) is not supported.*supported: .*conv2d"):
        from_torch(model, (torch.randn(3, 3),))


def test_from_torch_needs_a_module():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        from_torch(lambda x: x, (torch.randn(2),))


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_same_models_through_onnx_match_torch(case):
    """Exported to ONNX by torch (opset 17) and imported with from_onnx."""
    pytest.importorskip("onnx")
    import io
    import warnings
    from looptune.frontend.onnx import from_onnx
    model, inputs = CASES[case]
    want, arrays = expected_and_inputs(model, inputs)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, f, dynamo=False, opset_version=17)
    import onnx
    graph = from_onnx(onnx.load_from_string(f.getvalue()))
    for got, w in zip(evaluate(graph, *arrays), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)
