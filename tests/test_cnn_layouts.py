"""Whole CNN building blocks channels-last and fused as the untuned model compiler makes them:
depthwise convolutions, squeeze-excite, concatenations, SiLU / GELU as exporters spell them,
a model's own permutes; and untuned kernels cached across compiles. Each is checked against
the unprepared graph's numpy evaluation on random inputs."""
from __future__ import annotations

import math

import numpy as np
import pytest

from looptune.graph import GraphBuilder, compile_model, evaluate
from looptune.graph.fuse import fuse
from looptune.graph.simplify import prepare

RNG = np.random.default_rng(11)


def rand(*shape):
    return RNG.uniform(-1, 1, shape).astype("float32")


def mbconv(c=16, hw=8, expand=2, stride=1):
    """EfficientNet's block as exported: 1x1 expand + SiLU (x * sigmoid(x)), depthwise 3x3 +
    SiLU, squeeze-excite (global mean, two 1x1 convolutions, sigmoid, broadcast scale), 1x1
    project, residual add."""
    g = GraphBuilder("mbconv")
    x = g.input("x", (1, c, hw, hw))
    e = c * expand

    def silu(v):
        return g.op("mul", v, g.op("sigmoid", v))

    y = g.op("conv2d", x, g.const("w_expand", rand(e, c, 1, 1)))
    y = silu(g.op("add", y, g.const("b_expand", rand(1, e, 1, 1))))
    y = g.op("conv2d", y, g.const("w_dw", rand(e, 1, 3, 3)), groups=e, padding=(1, 1),
             stride=(stride, stride))
    y = silu(g.op("add", y, g.const("b_dw", rand(1, e, 1, 1))))
    s = g.op("mean", y, axis=(2, 3), keepdims=True)
    s = silu(g.op("conv2d", s, g.const("w_se1", rand(4, e, 1, 1))))
    s = g.op("sigmoid", g.op("conv2d", s, g.const("w_se2", rand(e, 4, 1, 1))))
    y = g.op("mul", y, s)
    y = g.op("conv2d", y, g.const("w_project", rand(c, e, 1, 1)))
    if stride == 1:
        y = g.op("add", y, x)
    return g.finish(y)


def dense_block(c=16, hw=6, growth=16, layers=3):
    """DenseNet's block: each layer's BN-ReLU-conv reads the concatenation of all before."""
    g = GraphBuilder("dense")
    feats = [g.input("x", (1, c, hw, hw))]
    first = g.op("conv2d", feats[0], g.const("w0", rand(c, c, 1, 1)))
    feats = [first]
    for i in range(layers):
        cat = feats[0] if len(feats) == 1 else g.op("concat", *feats, axis=1)
        k = cat.shape[1]
        h = g.op("relu", g.op("add", g.op("mul", cat, g.const(f"s{i}", rand(1, k, 1, 1))),
                              g.const(f"t{i}", rand(1, k, 1, 1))))
        feats.append(g.op("conv2d", h, g.const(f"w{i + 1}", rand(growth, k, 3, 3)),
                          padding=(1, 1)))
    return g.finish(g.op("concat", *feats, axis=1))


def convnext_block(c=16, hw=7):
    """ConvNeXt's block: depthwise 7x7, permute to NHWC, layer norm, linear, GELU (as erf),
    linear, layer scale, permute back, residual add."""
    g = GraphBuilder("convnext")
    x = g.input("x", (1, c, hw, hw))
    y = g.op("conv2d", x, g.const("w_dw", rand(c, 1, 7, 7)), groups=c, padding=(3, 3))
    y = g.op("add", y, g.const("b_dw", rand(1, c, 1, 1)))
    y = g.op("transpose", y, perm=(0, 2, 3, 1))
    y = g.op("layer_norm", y, g.const("gamma", rand(c)), g.const("beta", rand(c)))
    y = g.op("reshape", y, shape=(hw * hw, c))
    h = g.op("add", g.op("matmul", y, g.const("w1", rand(c, 4 * c))), g.const("b1", rand(4 * c)))
    gate = g.op("mul", g.op("add", g.op("erf", g.op("div", h, scalar=math.sqrt(2))),
                            scalar=1.0), scalar=0.5, reverse=True)
    h = g.op("mul", h, gate)
    y = g.op("add", g.op("matmul", h, g.const("w2", rand(4 * c, c))), g.const("b2", rand(c)))
    y = g.op("mul", g.op("reshape", y, shape=(1, hw, hw, c)), g.const("scale", rand(c)))
    y = g.op("transpose", y, perm=(0, 3, 1, 2))
    return g.finish(g.op("add", y, x))


def ops_of(graph):
    return [n.op for n in graph.nodes]


def test_depthwise_convolutions_and_squeeze_excite_stay_channels_last():
    graph = mbconv()
    p = prepare(graph)
    convs = [n for n in p.nodes if n.op == "conv2d"]
    assert [n.attrs.get("layout") for n in convs] == ["NCHW-NHWC"] + ["NHWC"] * 4
    assert convs[1].attrs["groups"] == 32 and convs[1].attrs["weight_layout"] == "CRSK"
    # the graph's input to NHWC for the residual add, the output back to NCHW: no others
    assert ops_of(p).count("transpose") == 2
    assert ops_of(p).count("silu") == 3 and "sigmoid" in ops_of(p)  # SE's gate stays
    x = rand(1, 16, 8, 8)
    np.testing.assert_allclose(evaluate(p, x)[0], evaluate(graph, x)[0], rtol=1e-4, atol=1e-4)


def test_a_broadcasting_scale_does_not_fuse_into_the_kernel_of_its_gate():
    groups = fuse(prepare(mbconv()))
    for grp in groups:
        assert all(n.output.shape == grp.output.shape for n in grp.nodes), grp.name
    scale = [g for g in groups if [n.op for n in g.nodes] == ["mul"]]
    assert len(scale) == 1 and scale[0].output.shape == (1, 8, 8, 32)


@pytest.mark.cc
@pytest.mark.parametrize("stride", [1, 2])
def test_mbconv_compiles_and_matches(stride):
    graph = mbconv(stride=stride)
    x = rand(1, 16, 8, 8)
    compiled = compile_model(graph, None, "cpu", num_threads=1)
    np.testing.assert_allclose(compiled(x), evaluate(graph, x)[0], rtol=1e-4, atol=1e-4)


def test_concatenations_of_channels_last_values_stay_channels_last():
    graph = dense_block()
    p = prepare(graph)
    cats = [n for n in p.nodes if n.op == "concat"]
    assert cats and all(n.attrs["axis"] == 3 for n in cats)
    assert ops_of(p).count("transpose") == 1
    x = rand(1, 16, 6, 6)
    np.testing.assert_allclose(evaluate(p, x)[0], evaluate(graph, x)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.cc
def test_dense_block_compiles_and_matches():
    graph = dense_block()
    x = rand(1, 16, 6, 6)
    compiled = compile_model(graph, None, "cpu", num_threads=1)
    np.testing.assert_allclose(compiled(x), evaluate(graph, x)[0], rtol=1e-4, atol=1e-4)


def test_a_models_own_permutes_around_channels_last_layers_cost_nothing():
    graph = convnext_block()
    p = prepare(graph)
    # the input for the residual and the output: the block's two permutes are gone
    assert ops_of(p).count("transpose") == 2
    assert "gelu" in ops_of(p) and "erf" not in ops_of(p)
    names = [g.name for g in fuse(p)]
    assert "fused_matmul_add_gelu" in names, names
    x = rand(1, 16, 7, 7)
    np.testing.assert_allclose(evaluate(p, x)[0], evaluate(graph, x)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.cc
def test_convnext_block_compiles_and_matches():
    graph = convnext_block()
    x = rand(1, 16, 7, 7)
    compiled = compile_model(graph, None, "cpu", num_threads=1)
    np.testing.assert_allclose(compiled(x), evaluate(graph, x)[0], rtol=1e-4, atol=1e-4)


def test_only_exact_gates_become_activations():
    g = GraphBuilder()
    x = g.input("x", (4, 8))
    near = g.op("mul", x, g.op("sigmoid", g.op("mul", x, scalar=1.5)))  # x * sigmoid(1.5x)
    read_twice = g.op("sigmoid", x)
    both = g.op("add", g.op("mul", x, read_twice), read_twice)
    p = prepare(g.finish(g.op("add", near, both)))
    assert "silu" not in ops_of(p)


@pytest.mark.cc
def test_a_second_compile_reads_the_untuned_kernels_back(monkeypatch, tmp_path):
    from looptune.graph import kernel_cache, planner
    monkeypatch.setenv("LOOPTUNE_CACHE_DIR", str(tmp_path))
    graph = mbconv()
    x = rand(1, 16, 8, 8)
    first = compile_model(graph, None, "cpu", num_threads=1)
    assert list((tmp_path / "default_kernels").glob("*.json"))
    calls = []
    monkeypatch.setattr(planner, "default_schedule",
                        lambda *a, **k: calls.append(a) or pytest.fail("scheduled again"))
    again = compile_model(graph, None, "cpu", num_threads=1)
    assert not calls
    np.testing.assert_array_equal(again(x), first(x))
    # another looptune (a changed source file) misses
    monkeypatch.setattr(kernel_cache, "code_fingerprint", lambda: "other")
    with pytest.raises(BaseException, match="scheduled again"):
        compile_model(graph, None, "cpu", num_threads=1)


def gpt2_mlp(n=8, d=16):
    """GPT-2's MLP as exported: linear, GELU in its tanh form with pow(x, 3), linear."""
    g = GraphBuilder("gpt2_mlp")
    x = g.input("x", (n, d))
    h = g.op("add", g.op("matmul", x, g.const("w1", rand(d, 4 * d))), g.const("b1", rand(4 * d)))
    inner = g.op("add", h, g.op("mul", g.op("pow", h, scalar=3.0), scalar=0.044715))
    t = g.op("add", g.op("tanh", g.op("mul", inner, scalar=math.sqrt(2 / math.pi))), scalar=1.0)
    h = g.op("mul", g.op("mul", h, scalar=0.5), t)
    return g.finish(g.op("matmul", h, g.const("w2", rand(4 * d, d))))


def test_gelu_in_its_tanh_form_becomes_one_epilogue():
    graph = gpt2_mlp()
    p = prepare(graph)
    gelus = [n for n in p.nodes if n.op == "gelu"]
    assert len(gelus) == 1 and gelus[0].attrs == {"approximate": "tanh"}
    assert not {"pow", "tanh"} & set(ops_of(p))
    assert "fused_matmul_add_gelu" in [g.name for g in fuse(p)]
    x = rand(8, 16)
    np.testing.assert_allclose(evaluate(p, x)[0], evaluate(graph, x)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.cc
def test_gpt2_mlp_compiles_and_matches():
    graph = gpt2_mlp()
    x = rand(8, 16)
    compiled = compile_model(graph, None, "cpu", num_threads=1)
    np.testing.assert_allclose(compiled(x), evaluate(graph, x)[0], rtol=1e-4, atol=1e-4)
