"""Layouts chosen at compile time: weights packed in the order a schedule reads them
(pack_layout, RewriteLayout) and convolutional activations kept channels-last."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune import te
from looptune.graph import GraphBuilder, compile_model, evaluate
from looptune.graph.default_schedule import default_schedule
from looptune.graph.simplify import prepare
from looptune.error import RunError
from looptune.runtime.ndarray import pack_array, pack_last_axis
from looptune.schedule import ScheduleError
from looptune.schedule.primitives.layout import PACKED
from looptune.tir.expr import Var
from looptune.tir.func import PrimFunc
from looptune.tune.postproc import RewriteLayout
from looptune.tune.postproc.rewrite_layout import LAYOUT_FREE, block_factor

RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.uniform(-1, 1, shape).astype("float32")


def matmul(M=24, K=40, N=72, layout_free=False):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    f = te.create_prim_func([A, B, C])
    if layout_free:
        f = PrimFunc(f.name, f.params, f.body, f.attrs + ((LAYOUT_FREE, (1,)),))
    return f


def column_tiles(f, width=16):
    """j split by `width`; its blocks outermost, the tile inside the reduction."""
    sch = lt.Schedule(f)
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    jo, ji = sch.split(j, [None, width])
    sch.reorder(jo, i, k, ji)
    sch.vectorize(ji)
    return sch, b


def test_pack_last_axis_blocks_and_zero_pads():
    a = rand(3, 2, 10)
    p = pack_last_axis(a, 4)
    assert p.shape == (3, 3, 2, 4) and p.ctypes.data % 64 == 0
    np.testing.assert_array_equal(p[1, :, :, 2], a[:, :, 6])
    np.testing.assert_array_equal(p[2, :, :, 2:], 0)  # columns 10 and 11 do not exist


@pytest.mark.cc
def test_a_packed_weight_gives_the_same_result_and_reads_contiguously():
    sch, b = column_tiles(matmul())  # 72 columns: 4 blocks of 16 and a padded one
    sch.pack_layout(b, 1, 16)
    assert sch.func.attr(PACKED) == ((1, 16),)
    assert sch.func.params[1].shape == (5, 40, 16)
    mod = lt.build(sch)
    assert "B + j_0 * 640 + k * 16" in mod.source  # one contiguous 40x16 panel per block
    a, w = rand(24, 40), rand(40, 72)
    c = np.full((24, 72), np.nan, "float32")
    mod(a, pack_last_axis(w, 16), c)
    np.testing.assert_allclose(c, a @ w, rtol=1e-4, atol=1e-4)
    # the trace replays it
    again = lt.Schedule(matmul())
    sch.trace.apply_to_schedule(again)
    assert again.func.params[1].shape == (5, 40, 16)


def test_pack_layout_refuses_what_it_cannot_pack():
    sch, b = column_tiles(matmul())
    with pytest.raises(ScheduleError, match="factor must be an int >= 2"):
        sch.pack_layout(b, 1, 1)
    with pytest.raises(ScheduleError, match="no read buffer #5"):
        sch.pack_layout(b, 5, 16)
    with pytest.raises(ScheduleError, match="axis must be one of B's axes 0..1"):
        sch.pack_layout(b, 1, 8, axis=2)
    sch2, b2 = column_tiles(matmul())
    cw = sch2.cache_read(b2, 0, "local")
    with pytest.raises(ScheduleError, match="not an argument"):
        sch2.pack_layout(b2, 0, 4)  # A's local copy
    del cw


def test_rewrite_layout_packs_only_layout_free_arguments_by_the_tile_inside_the_reduction():
    sch, _ = column_tiles(matmul(layout_free=True), 16)
    RewriteLayout().apply(sch)
    assert sch.func.attr(PACKED) == ((1, 16),)
    sch, _ = column_tiles(matmul(layout_free=False), 16)
    RewriteLayout().apply(sch)
    assert sch.func.attr(PACKED) is None  # a user's own argument keeps its layout
    sch, _ = column_tiles(matmul(N=16, layout_free=True), 16)
    RewriteLayout().apply(sch)
    assert sch.func.attr(PACKED) is None  # the tile covers every column: nothing to gain


def test_block_factor_needs_the_lowest_digits_of_the_index():
    class Loop:
        def __init__(self, name, extent):
            self.loop_var, self.extent = Var(name, "int32"), extent
    jo, k, ji = Loop("jo", 4), Loop("k", 40), Loop("ji", 16)
    assert block_factor([jo, k, ji], jo.loop_var * 16 + ji.loop_var, {k.loop_var}) == 16
    # the tile inside the reduction is the high digit: blocks of it would not be contiguous
    assert block_factor([ji, k, jo], jo.loop_var * 16 + ji.loop_var, {k.loop_var}) is None
    assert block_factor([jo, ji, k], jo.loop_var * 16 + ji.loop_var, {k.loop_var}) is None


def conv_net(c=8, hw=10):
    """conv-relu, maxpool, conv + residual, relu, global mean, linear: NCHW, as imported."""
    g = GraphBuilder("convnet")
    x = g.input("x", (1, 3, hw, hw))
    y = g.op("conv2d", x, g.const("w0", rand(c, 3, 3, 3)), padding=(1, 1))
    y = g.op("relu", g.op("add", y, g.const("b0", rand(1, c, 1, 1))))
    y = g.op("max_pool2d", y, kernel=(3, 3), stride=(2, 2), padding=(1, 1))
    z = g.op("conv2d", y, g.const("w1", rand(2 * c, c, 3, 3)), padding=(1, 1))
    z = g.op("relu", g.op("add", z, g.const("b1", rand(2 * c, 1, 1))))
    z = g.op("conv2d", z, g.const("w2", rand(c, 2 * c, 1, 1)))
    z = g.op("relu", g.op("add", z, y))
    m = g.op("mean", z, axis=(2, 3), keepdims=True)
    f = g.op("reshape", m, shape=(1, c))
    return g.finish(g.op("matmul", f, g.const("fc", rand(c, 5))))


def test_channels_last_keeps_activations_nhwc_between_convolutions():
    graph = conv_net()
    p = prepare(graph)
    layouts = [(n.op, n.attrs.get("layout")) for n in p.nodes
               if n.op in ("conv2d", "max_pool2d")]
    assert layouts == [("conv2d", "NCHW-NHWC"), ("max_pool2d", "NHWC"), ("conv2d", "NHWC"),
                       ("conv2d", "NHWC")]
    # leaving NHWC once, at the mean: (1, 1, 1, C) -> (1, C, 1, 1) moves unit axes only, a view
    assert sum(n.op == "transpose" for n in p.nodes) == 0
    x = rand(1, 3, 10, 10)
    np.testing.assert_allclose(evaluate(p, x)[0], evaluate(graph, x)[0], rtol=1e-4,
                               atol=1e-4)


@pytest.mark.cc
def test_a_channels_last_model_with_packed_weights_compiles_and_matches():
    graph = conv_net(c=32, hw=8)
    # the default schedules tile 64 output channels by two vectors: the weight is packed
    tasks = lt.extract_tasks(graph)
    packed = [default_schedule(t.func).func.attr(PACKED) for t in tasks]
    assert any(packed), packed
    compiled = compile_model(graph, None, "cpu", num_threads=1)
    x = rand(1, 3, 8, 8)
    np.testing.assert_allclose(compiled(x), evaluate(graph, x)[0], rtol=1e-3, atol=1e-3)


@pytest.mark.cc
def test_the_runner_packs_random_inputs_like_the_reference_sees_them():
    from looptune.tune.runner import LocalRunner
    from looptune.tune.runner.base import EvaluatorConfig, RunnerInput
    f = matmul()
    ref = lt.build(f)
    sch, b = column_tiles(f)
    sch.pack_layout(b, 1, 16)
    mod = lt.build(sch)
    config = EvaluatorConfig(number=1, repeat=2, min_repeat_ms=0, num_threads=1)

    def run(packed):
        inp = RunnerInput(str(mod.lib_path), mod.symbol, tuple(ref.args), config,
                          reference=(str(ref.lib_path), ref.symbol), packed=packed)
        with LocalRunner(timeout_s=30) as r:
            return r.run([inp])[0]

    assert run(((1, 16),)).ok
    # given the weight unpacked, the kernel reads the wrong elements: the check catches it
    assert run(()).error_class == "wrong_result"


def test_pack_layout_twice_packs_the_packed_layout_on_any_axis():
    """(K, N) by 16 on N: (N/16, K, 16); then by 8 on K (axis 1 of the packed layout):
    (K/8, N/16, 8, 16). The spec records both steps; pack_array packs data alike and the
    kernel computes the same."""
    sch, b = column_tiles(matmul())
    sch.pack_layout(b, 1, 16)
    sch.pack_layout(b, 1, 8, axis=1)
    assert sch.func.attr(PACKED) == ((1, ((16, 1), (8, 1))),)
    assert sch.func.params[1].shape == (5, 5, 8, 16)
    mod = lt.build(sch)
    assert mod.packed_params == ((1, ((16, 1), (8, 1))),)
    a, w = rand(24, 40), rand(40, 72)
    packed = pack_array(w, ((16, 1), (8, 1)))
    assert packed.shape == (5, 5, 8, 16) and packed[3, 2, 5, 7] == w[3 * 8 + 5, 2 * 16 + 7]
    c = np.full((24, 72), np.nan, "float32")
    mod(*mod.pack(a, w, c))
    np.testing.assert_allclose(c, a @ w, rtol=1e-4, atol=1e-4)
    with pytest.raises(RunError, match="takes it packed"):
        mod(a, w, c)
    again = lt.Schedule(matmul())
    sch.trace.apply_to_schedule(again)
    assert again.func.attr(PACKED) == sch.func.attr(PACKED)
