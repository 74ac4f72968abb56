"""The PyTorch importer: every supported operator matches torch on random inputs, through
the graph's numpy reference and (with a C compiler) through its fused kernels."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from looptune.frontend.common import UnsupportedOperators  # noqa: E402
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

# core ATen operators beyond CASES (which the ONNX test also runs)
ATEN_CASES = {
    "conv1d": (Fn(lambda s, x: s.mods[0](x), nn.Conv1d(4, 6, 5, stride=2, padding=2, groups=2)),
               (torch.randn(1, 4, 30),)),
    "conv1d_same": (Fn(lambda s, x: s.mods[0](x) + s.mods[1](x),
                       nn.Conv1d(4, 6, 4, padding="same"),
                       nn.Conv1d(4, 6, 3, padding="same", dilation=2)), (torch.randn(1, 4, 17),)),
    "conv2d_same": (Fn(lambda s, x: s.mods[0](x), nn.Conv2d(4, 6, (2, 3), padding="same")),
                    x4()),
    "pool1d_bn1d": (Fn(lambda s, x: F.avg_pool1d(F.max_pool1d(s.mods[0](x), 3), 2),
                       nn.BatchNorm1d(4)), (torch.randn(2, 4, 25),)),
    "pool_ceil_mode": (Fn(lambda s, x: F.max_pool2d(x, 3, 2, ceil_mode=True)
                          + F.avg_pool2d(x, 3, 2, ceil_mode=True)), x4(hw=10)),
    "avg_pool_exclude_pad": (Fn(lambda s, x: F.avg_pool2d(x, 3, 1, 1, count_include_pad=False)),
                             x4()),
    "clamps": (Fn(lambda s, x: F.relu6(x * 4) + F.hardtanh(x, -0.5, 0.5) + x.clamp(min=0.1)
                  + x.clamp(max=-0.2) + F.hardswish(x * 4) + F.hardsigmoid(x * 4)),
               (torch.randn(4, 9),)),
    "unary_math": (Fn(lambda s, x: torch.rsqrt(x.abs() + 1) + torch.reciprocal(x.abs() + 1)
                      + torch.log(x.abs() + 1) + x.pow(2) + x.abs().pow(1.5) + 2.0 ** x
                      + F.leaky_relu(x, 0.1) + F.elu(x) + F.softplus(x) + F.mish(x)),
                   (torch.randn(4, 9),)),
    "compare_where": (Fn(lambda s, a, b: torch.where(a > b, a, b * 2) + (a <= 0).float()
                         + torch.where(a != b, 1.0, 0.0) + (a == a).float()
                         + torch.where(b >= 0.5, a, torch.zeros_like(a))),
                      (torch.randn(3, 8), torch.randn(1, 8))),
    "int_arithmetic": (Fn(lambda s, ids: ((ids.ne(1).int().cumsum(1) * ids.ne(1).int()) + 1)
                          .float() * 0.5), (torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]]),)),
    "reductions": (Fn(lambda s, x: x.mean(dim=(0, 2), keepdim=True).sum() + x.amax(dim=1).sum(-1)
                      - x.amin(dim=(1, 2)) + x.sum(dim=-1).mean(1)),
                   (torch.randn(3, 4, 5),)),
    "var_std": (Fn(lambda s, x: x.var(dim=-1, keepdim=True).sum(-1) + x.std(dim=1)
                   + torch.var_mean(x, dim=1, correction=0)[0]
                   + torch.var_mean(x, dim=1)[1]), (torch.randn(3, 6),)),
    "log_softmax": (Fn(lambda s, x: F.log_softmax(x, dim=1)), (torch.randn(2, 7, 3),)),
    "layer_norm_2d_group_norm": (Fn(lambda s, x: s.mods[0](x).sum(1) + s.mods[1](x).sum(1),
                                    nn.LayerNorm([4, 6]), nn.GroupNorm(2, 4)),
                                 (torch.randn(2, 4, 4, 6),)),
    "matmul_broadcast_addmm": (Fn(lambda s, a, b, c: (a @ b).sum(0)[0]
                                  + torch.addmm(c, a[0, 0], b[0, 0, :, :5], beta=0.5, alpha=2.0)),
                               (torch.randn(2, 1, 5, 8), torch.randn(1, 3, 8, 5),
                                torch.randn(5, 5))),
    "expand_gather": (Fn(lambda s, x, idx: x.unsqueeze(0).expand(3, -1, -1).sum(0)
                         + torch.gather(x, 1, idx) + x.index_select(1, idx[0])),
                      (torch.randn(2, 3), torch.tensor([[2, 0, 1], [1, 1, 0]]))),
    "split_chunk_unbind_stack": (Fn(lambda s, x: torch.stack(
        [a + b for a, b in zip(x.chunk(2, dim=1), x.split([3, 3], dim=1))], 0).sum(0)
        + torch.cat(x.unbind(0), 0).reshape(4, 3)[1:3]), (torch.randn(2, 6),)),
    "pad_select_casts": (Fn(lambda s, x: F.pad(x, (1, 2, 0, 1), value=0.5)[:, 1]
                            + x.to(torch.float64).to(torch.float32).sum()),
                         (torch.randn(2, 3, 4),)),
    "constant_folding": (Fn(lambda s, x: x + torch.arange(x.shape[-1]).float()[None]
                            * torch.ones(x.shape[0], 1) + torch.full_like(x, 2.0)
                            + (torch.arange(4)[:, None] <= torch.arange(4)[None]).float()[0]),
                         (torch.randn(3, 4),)),
    "attention": (Fn(lambda s, q, k, v: F.scaled_dot_product_attention(q, k, v)
                     + F.scaled_dot_product_attention(q, k, v, is_causal=True)
                     + F.scaled_dot_product_attention(
                         q, k, v, attn_mask=torch.ones(5, 5).tril().bool(), scale=0.3)),
                  (torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4))),
    "index_max_dim": (Fn(lambda s, x, idx: x[:, idx].sum(1) + x[idx[:2]].sum(0)
                         + x.max(dim=1)[0] + x.min(dim=1, keepdim=True).values
                         + x.clamp_min(0.2) + x.clamp_max(-0.2)),
                      (torch.randn(3, 3), torch.tensor([2, 0, 1]))),
    "upsample": (Fn(lambda s, x: F.interpolate(x, scale_factor=2, mode="nearest")
                    + F.interpolate(x, size=(16, 16), mode="bilinear")
                    + F.interpolate(x, size=(16, 16), mode="bilinear", align_corners=True)
                    + F.interpolate(x, scale_factor=1.5, mode="nearest")[..., :4, :4]
                    .repeat(1, 1, 4, 4)
                    + F.interpolate(x[..., :5, :5], scale_factor=1.5, mode="bilinear")
                    [..., :4, :4].repeat(1, 1, 4, 4)), x4()),
}
ALL_CASES = {**CASES, **ATEN_CASES}


def expected_and_inputs(model, inputs):
    model.eval()
    with torch.no_grad():
        want = model(*inputs)
    want = [want] if isinstance(want, torch.Tensor) else list(want)
    arrays = [x.numpy().astype("int32") if x.dtype == torch.int64 else x.numpy() for x in inputs]
    return [w.numpy() for w in want], arrays


@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_imported_operators_match_torch(case):
    model, inputs = ALL_CASES[case]
    graph = from_torch(model, inputs)
    want, arrays = expected_and_inputs(model, inputs)
    for got, w in zip(evaluate(graph, *arrays), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)


@pytest.mark.cc
@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_imported_operators_run_as_kernels(case):
    from test_graph import run_kernels
    model, inputs = ALL_CASES[case]
    graph = from_torch(model, inputs)
    want, arrays = expected_and_inputs(model, inputs)
    for got, w in zip(run_kernels(graph, *arrays), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-3, atol=1e-4)


def test_batch_norm_folds_into_the_convolution():
    model, inputs = CASES["conv_bn_relu"]
    graph = from_torch(model, inputs)
    assert [n.op for n in graph.nodes] == ["conv2d", "add", "relu"]
    assert [g.name for g in fuse(graph)] == ["fused_conv2d_add_relu"]


def test_every_unsupported_operator_is_named_in_one_error():
    model = Fn(lambda s, x: torch.sort(x, dim=0)[0] + torch.sort(x * 2, dim=1)[0]
               + torch.topk(x, 3, dim=1)[0].sum(1, keepdim=True) + F.relu(x))
    with pytest.raises(UnsupportedOperators) as info:
        from_torch(model, (torch.randn(3, 3),))
    assert set(info.value.problems) == {"aten.sort.default", "aten.topk.default"}
    assert info.value.problems["aten.sort.default"][0] == 2
    message = str(info.value)
    assert "aten.sort.default x2 (e.g. node sort)" in message
    assert "aten.topk.default x1 (e.g. node topk)" in message


def test_a_refused_attribute_is_named_with_its_reason():
    model = Fn(lambda s, x: F.max_pool2d(x, 2, dilation=2) + 1)
    with pytest.raises(UnsupportedOperators, match=r"max_pool2d_with_indices\.default x1 .*"
                                                   r"dilation"):
        from_torch(model, x4())


def test_an_exported_program_imports_like_its_module():
    model, inputs = ATEN_CASES["clamps"]
    with torch.no_grad():
        ep = torch.export.export(model.eval(), inputs)
    assert from_torch(ep).structurally_equal(from_torch(model, inputs))
    with pytest.raises(TypeError, match="example inputs"):
        from_torch(model)


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


ZOO_SMALL = ("mobilenet_v3_small", "bert_tiny", "m5")


def zoo_model(name):
    pytest.importorskip("torchvision")
    pytest.importorskip("transformers")
    from looptune.testing import zoo
    assert set(ZOO_SMALL) == set(zoo.names("small"))
    model, inputs = zoo.build(name)
    want, arrays = expected_and_inputs(model, inputs)
    return from_torch(model, inputs), arrays, want[0]


def rel_err(got, want):
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


@pytest.mark.parametrize("name", ZOO_SMALL)
def test_the_small_zoo_imports_and_matches_torch(name):
    graph, arrays, want = zoo_model(name)
    assert rel_err(evaluate(graph, *arrays)[0], want) <= 1e-4


@pytest.mark.cc
@pytest.mark.parametrize("name", ZOO_SMALL)
def test_the_small_zoo_compiles_and_matches_torch(name):
    import looptune
    graph, arrays, want = zoo_model(name)
    compiled = looptune.compile_model(graph, target="cpu")
    assert rel_err(compiled(*arrays), want) <= 1e-3
