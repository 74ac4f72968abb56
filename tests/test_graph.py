"""The graph IR, fusion and task extraction (pure Python), and fused kernels that compute
what the graph means (with a C compiler)."""
from __future__ import annotations

import numpy as np
import pytest

from looptune.graph import GraphBuilder, GraphError, evaluate, fold_constants
from looptune.graph.fuse import fuse
from looptune.graph.simplify import fold_conv_affine
from looptune.graph.tasks import extract_tasks

RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.uniform(-1, 1, shape).astype("float32")


def mlp(names=("x", "w1", "b1", "w2"), seed=0):
    r = np.random.default_rng(seed)
    g = GraphBuilder("mlp")
    x = g.input(names[0], (1, 784))
    w1 = g.const(names[1], r.uniform(-1, 1, (256, 784)).astype("float32"))
    h = g.op("relu", g.op("add", g.op("matmul", x, w1, transpose_b=True),
                          g.const(names[2], r.uniform(-1, 1, 256).astype("float32"))))
    w2 = g.const(names[3], r.uniform(-1, 1, (10, 256)).astype("float32"))
    return g.finish(g.op("matmul", h, w2, transpose_b=True))


def resnet_block(c=8, hw=8):
    """conv-bn-relu-conv-bn, plus the identity, relu: as an importer makes it."""
    g = GraphBuilder("block")
    x = g.input("x", (1, c, hw, hw))

    def conv_bn(v, name):
        y = g.op("conv2d", v, g.const(name + "_w", rand(c, c, 3, 3)), padding=(1, 1))
        y = g.op("mul", y, g.const(name + "_s", rand(1, c, 1, 1)))
        return g.op("add", y, g.const(name + "_t", rand(1, c, 1, 1)))

    y = g.op("relu", conv_bn(x, "a"))
    y = g.op("relu", g.op("add", conv_bn(y, "b"), x))
    return g.finish(y)


def test_graph_prints_its_nodes_with_types():
    text = str(mlp())
    assert "graph mlp(%x: float32[1, 784])" in text
    assert "%matmul = matmul(%x, %w1, transpose_b=True)  # float32[1, 256]" in text
    assert text.strip().endswith("return %matmul_1")


def test_bad_nodes_get_errors_naming_the_node_and_the_problem():
    g = GraphBuilder()
    x = g.input("x", (2, 3))
    with pytest.raises(GraphError, match=r"node frob: unknown operator 'frob'.*matmul"):
        g.op("frob", x)
    with pytest.raises(GraphError, match=r"node mm \(matmul\).*inner dimensions 3 and 4"):
        g.op("matmul", x, g.const("w", rand(4, 5)), name="mm")
    with pytest.raises(GraphError, match=r"unknown attribute\(s\) axes.*takes axis, keepdims"):
        g.op("mean", x, axes=(1,))
    with pytest.raises(GraphError, match=r"node mean_\d* \(mean\): attribute axis"):
        g.op("mean", x, axis=[object()])


def test_structural_equality_ignores_names_but_not_data_or_attributes():
    a, b = mlp(), mlp(("inp", "W", "bias", "W2"))
    assert a.structurally_equal(b)
    assert not a.structurally_equal(mlp(seed=1))
    g = GraphBuilder()
    x = g.input("x", (2, 3))
    s1 = g.finish(g.op("mean", x, axis=1))
    g = GraphBuilder()
    x = g.input("x", (2, 3))
    s2 = g.finish(g.op("mean", x, axis=0))
    assert s1.structural_key() != s2.structural_key()


def test_epilogues_fuse_into_the_matmul_they_follow():
    assert [grp.name for grp in fuse(mlp())] == ["fused_matmul_add_relu", "fused_matmul"]


def test_resnet_block_fuses_batch_norm_and_the_residual_add():
    block = resnet_block()
    folded = fold_conv_affine(block)
    assert [n.op for n in folded.nodes].count("mul") == 0  # the scales went into the weights
    assert [grp.name for grp in fuse(folded)] == ["fused_conv2d_add_relu",
                                                   "fused_conv2d_add_add_relu"]
    x = rand(1, 8, 8, 8)
    np.testing.assert_allclose(evaluate(folded, x)[0], evaluate(block, x)[0], rtol=1e-4,
                               atol=1e-5)


def test_elementwise_prologue_fuses_into_the_reduction_it_feeds():
    g = GraphBuilder()
    x = g.input("x", (4, 32))
    y = g.op("mean", g.op("add", g.op("mul", x, scalar=2.0), scalar=1.0), axis=1)
    z = g.op("softmax", g.op("exp", g.input("x2", (4, 8))), axis=-1)
    w = g.op("sigmoid", g.op("sum", z, axis=1))  # an elementwise epilogue of a reduction
    assert [grp.name for grp in fuse(g.finish(y, w))] == ["fused_mul_add_mean",
                                                           "fused_exp_softmax",
                                                           "fused_sum_sigmoid"]


def test_a_value_read_twice_ends_its_group():
    g = GraphBuilder()
    x = g.input("x", (4, 8))
    h = g.op("matmul", x, g.const("w", rand(8, 8)))
    out = g.op("add", g.op("relu", h), g.op("sigmoid", h))
    names = [grp.name for grp in fuse(g.finish(out))]
    assert names == ["fused_matmul", "fused_sigmoid", "fused_relu_add"]


def test_identical_layers_are_one_task_whatever_their_names_and_weights():
    g = GraphBuilder()
    x = g.input("x", (1, 64))
    for i in range(3):  # three equal layers
        x = g.op("relu", g.op("matmul", x, g.const(f"w{i}", rand(64, 64)), name=f"fc{i}"))
    x = g.op("matmul", x, g.const("head", rand(64, 10)))
    tasks = extract_tasks(g.finish(x))
    assert [(t.task_name, t.weight) for t in tasks] == [("fused_matmul_relu", 3),
                                                        ("fused_matmul", 1)]
    assert len(tasks[0].groups) == 3


def test_constant_subgraphs_fold_at_compile_time():
    g = GraphBuilder()
    x = g.input("x", (2, 4))
    w = g.op("transpose", g.const("w", rand(3, 4)), perm=(1, 0))  # a weight layout change
    folded = fold_constants(g.finish(g.op("matmul", x, w)))
    assert [n.op for n in folded.nodes] == ["matmul"]
    assert folded.nodes[0].inputs[1].shape == (4, 3)


# ---------------------------------------------------------------------- kernels (cc)
def run_kernels(graph, *inputs):
    """The graph computed by its fused kernels (unscheduled, compiled with cc), in order."""
    import looptune as lt
    from looptune.runtime import empty
    env = {id(v): np.asarray(a) for v, a in zip(graph.inputs, inputs)}

    def get(v):
        if v.is_const:
            return v.data
        if id(v) not in env:  # a view: the same bytes, reshaped
            env[id(v)] = get(v.producer.inputs[0]).reshape(v.shape)
        return env[id(v)]

    for grp in fuse(graph):
        mod = lt.build(grp.prim_func())
        out = empty(grp.output.shape, grp.output.dtype)
        mod(*[np.ascontiguousarray(get(v)) for v in grp.inputs], out)
        env[id(grp.output)] = out
    return [get(v) for v in graph.outputs]


@pytest.mark.cc
def test_fused_kernels_compute_the_graph():
    x = rand(1, 8, 8, 8)
    block = fold_conv_affine(resnet_block())
    np.testing.assert_allclose(run_kernels(block, x)[0], evaluate(block, x)[0], rtol=1e-4,
                               atol=1e-4)
    m = mlp()
    x = rand(1, 784)
    np.testing.assert_allclose(run_kernels(m, x)[0], evaluate(m, x)[0], rtol=1e-4, atol=1e-3)


def strided_conv(stride=2, hw=16):
    g = GraphBuilder("strided")
    x = g.input("x", (1, 4, hw, hw))
    y = g.op("conv2d", x, g.const("w", rand(24, 4, 3, 3)), stride=(stride, stride),
             padding=(1, 1))
    return g.finish(g.op("relu", g.op("add", y, g.const("b", rand(1, 24, 1, 1)))))


def test_convolutions_with_constant_weights_compute_channels_last():
    from looptune.graph.simplify import prepare
    g = GraphBuilder()
    x, w = g.input("x", (1, 4, 8, 8)), g.input("w", (6, 4, 3, 3))  # a weight given at run time
    runtime_weight = g.finish(g.op("conv2d", x, w, padding=(1, 1)))
    for graph, layout in ((strided_conv(2, 16), "CRSK"), (strided_conv(1, 8), "CRSK"),
                          (runtime_weight, "KCRS")):
        prepared = prepare(graph)
        conv = next(n for n in prepared.nodes if n.op == "conv2d")
        assert conv.attrs.get("weight_layout", "KCRS") == layout
        args = [rand(*v.shape) for v in graph.inputs]
        np.testing.assert_allclose(evaluate(prepared, *args)[0], evaluate(graph, *args)[0],
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.cc
def test_channels_last_convolution_kernels_match():
    from looptune.graph import compile_model
    for graph in (strided_conv(2, 16), strided_conv(1, 8)):
        x = rand(*graph.inputs[0].shape)
        compiled = compile_model(graph, None, "cpu", num_threads=1)
        np.testing.assert_allclose(compiled(x), evaluate(graph, x)[0], rtol=1e-4, atol=1e-4)


def test_a_reshaped_value_that_broadcasts_stays_where_it_is():
    """sink_views moves a reshape below an elementwise operator only when the reshaped value
    has the output's size: a scalar reshaped to () and added to a vector broadcasts."""
    from looptune.graph.simplify import prepare
    g = GraphBuilder("scalar")
    x = g.input("x", (3, 4))
    total = g.op("reshape", g.op("sum", x, axis=(0, 1)), shape=())
    graph = g.finish(g.op("add", g.op("max", x, axis=1), total))
    a = rand(3, 4)
    np.testing.assert_allclose(evaluate(prepare(graph), a)[0], a.max(1) + a.sum(), rtol=1e-5)
