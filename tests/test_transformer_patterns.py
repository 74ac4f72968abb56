"""Transformer patterns (graph/patterns.py) and the fusions they enable (graph/fuse.py), on
hand-built blocks spelled as exporters spell them: each prepared graph computes what the
original does (evaluated, and compiled) in the kernels claimed."""
from __future__ import annotations

import math

import numpy as np
import pytest

from looptune.graph import evaluate
from looptune.graph.fuse import fuse
from looptune.graph.ir import GraphBuilder
from looptune.graph.simplify import prepare

L, H, D = 16, 2, 16
E = H * D


def kernels_of(graph, *inputs) -> list:
    """The prepared graph's kernel names, after checking that it equals the original."""
    want = evaluate(graph, *inputs)
    prepared = prepare(graph)
    for got, w in zip(evaluate(prepared, *inputs), want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5)
    return [g.name for g in fuse(prepared)]


def compiled_matches(graph, *inputs) -> None:
    import looptune
    want = evaluate(graph, *inputs)
    got = looptune.compile_model(graph, target="cpu", num_threads=1)(*inputs)
    got = got if isinstance(got, (list, tuple)) else [got]
    for a, b in zip(got, want):  # (a NaN fails the comparison)
        assert np.max(np.abs(np.asarray(a) - b)) <= 1e-5 * max(1.0, np.max(np.abs(b)))


def ops_of(graph) -> list:
    return [n.op for n in prepare(graph).nodes]


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


# ------------------------------------------------------------------ blocks
def nan_guarded_softmax():
    """where(isnan(p), 0, p) after a masked softmax; row 3 is masked out entirely."""
    g = GraphBuilder("guard")
    x = g.input("x", (2, 8, 16))
    mask = np.zeros((8, 16), "float32")
    mask[3] = -np.inf
    p = g.op("softmax", g.op("add", x, g.const("mask", mask)), axis=-1)
    y = g.op("where", g.op("isnan", p), g.const("zero", np.float32(0)), p)
    return g.finish(y), (rand(2, 8, 16),)


def gelu_after_matmul(spelling: str):
    g = GraphBuilder("gelu")
    x = g.input("x", (8, 32))
    h = g.op("matmul", x, g.const("w", rand(32, 64, seed=1)))
    if spelling == "tanh":  # GPT-2's: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = g.op("mul", g.op("pow", h, scalar=3.0), scalar=0.044715)
        inner = g.op("mul", g.op("add", h, cube), scalar=math.sqrt(2 / math.pi))
        y = g.op("mul", g.op("mul", h, scalar=0.5),
                 g.op("add", g.op("tanh", inner), scalar=1.0))
    else:  # (x (1 + erf(x / sqrt 2))) * 0.5
        e = g.op("add", g.op("erf", g.op("div", h, scalar=math.sqrt(2))), scalar=1.0)
        y = g.op("mul", g.op("mul", h, e), scalar=0.5)
    return g.finish(y), (rand(8, 32),)


def rms_norm_block(spelling: str):
    """T5's: x * 1 / sqrt(mean(x^2) + eps) * w."""
    g = GraphBuilder("rms")
    x = g.input("x", (1, 8, 32))
    sq = g.op("mul", x, x) if spelling == "mul" else g.op("pow", x, scalar=2.0)
    r = g.op("add", g.op("mean", sq, axis=(2,), keepdims=True), scalar=1e-6)
    r = g.op("reciprocal", g.op("sqrt", r)) if spelling == "mul" else g.op("rsqrt", r)
    y = g.op("mul", g.const("w", rand(32, seed=2) + 1), g.op("mul", x, r))
    return g.finish(y), (rand(1, 8, 32),)


def attention_block(qkv: str = "separate"):
    """One self-attention as the ONNX exporter writes BERT's ("separate" q, k, v projections)
    and GPT-2's ("fused": one projection, sliced): heads split by view + transpose, q and k
    scaled by d**-0.25 each, a mask, a NaN-guarded softmax, heads merged, out projection."""
    g = GraphBuilder("attention")
    x = g.input("x", (1, L, E))
    x2 = g.op("reshape", x, shape=(L, E))

    def linear(a, n, seed):
        return g.op("add", g.op("matmul", a, g.const(f"w{seed}", rand(E, n, seed=seed))),
                    g.const(f"b{seed}", rand(n, seed=seed + 10)))

    if qkv == "separate":
        q, k, v = (g.op("reshape", linear(x2, E, s), shape=(1, L, H, D)) for s in (1, 2, 3))
    else:
        both = g.op("reshape", linear(x2, 3 * E, 1), shape=(1, L, 3 * E))
        q, k, v = (g.op("reshape", g.op("slice", both, axis=2, start=i * E, stop=(i + 1) * E),
                        shape=(1, L, H, D)) for i in range(3))
    s = D ** -0.25
    q = g.op("mul", g.op("transpose", q, perm=(0, 2, 1, 3)), scalar=s)
    k = g.op("reshape", g.op("transpose", k, perm=(0, 2, 1, 3)), shape=(H, L, D))
    k = g.op("mul", g.op("transpose", k, perm=(0, 2, 1)), scalar=s)
    v = g.op("reshape", g.op("transpose", v, perm=(0, 2, 1, 3)), shape=(H, L, D))
    scores = g.op("add", g.op("batch_matmul", g.op("reshape", q, shape=(H, L, D)), k),
                  g.const("mask", np.triu(np.full((L, L), -1e4, "float32"), 1)))
    p = g.op("softmax", g.op("reshape", scores, shape=(1, H, L, L)), axis=3)
    p = g.op("where", g.op("isnan", p), g.const("zero", np.float32(0)), p)
    o = g.op("batch_matmul", g.op("reshape", p, shape=(H, L, L)), v)
    o = g.op("transpose", g.op("reshape", o, shape=(1, H, L, D)), perm=(0, 2, 1, 3))
    y = linear(g.op("reshape", o, shape=(L, E)), E, 4)
    return g.finish(y), (rand(1, L, E),)


def attention_op_block():
    """The torch importer's spelling: heads split by view + transpose, the attention op."""
    g = GraphBuilder("sdpa")
    x = g.input("x", (L, E))
    q, k, v = (g.op("transpose", g.op("reshape", g.op("matmul", x, g.const(f"w{s}", rand(
        E, E, seed=s))), shape=(1, L, H, D)), perm=(0, 2, 1, 3)) for s in (1, 2, 3))
    o = g.op("transpose", g.op("attention", q, k, v), perm=(0, 2, 1, 3))
    return g.finish(g.op("matmul", g.op("reshape", o, shape=(L, E)), g.const("wo", rand(E, E)))), \
        (rand(L, E),)


def vit_attention_scores():
    """torchvision ViT's: the fused projection viewed (1, L, 1, 3, E), transposed to
    (3, L, 1, 1, E) and sliced; (1, L, E) <-> (L, 1, E) transposes around it."""
    g = GraphBuilder("vit")
    x = g.input("x", (1, L, E))
    t = g.op("reshape", g.op("transpose", x, perm=(1, 0, 2)), shape=(L, E))
    qkv = g.op("matmul", t, g.const("w", rand(E, 3 * E, seed=1)))
    qkv = g.op("reshape", g.op("transpose", g.op("reshape", qkv, shape=(1, L, 1, 3, E)),
                               perm=(3, 1, 2, 0, 4)), shape=(3, L, 1, E))
    q, k = (g.op("reshape", g.op("slice", qkv, axis=0, start=i, stop=i + 1), shape=(L, H, D))
            for i in range(2))
    s = g.op("batch_matmul", g.op("transpose", q, perm=(1, 0, 2)),
             g.op("transpose", k, perm=(1, 2, 0)))
    return g.finish(g.op("softmax", s, axis=-1)), (rand(1, L, E),)


# ------------------------------------------------------------------ pure Python
def test_nan_guard_is_read_by_the_next_matmul():
    """where(isnan(p), 0, p) after a softmax reads p twice: it does not fuse into the softmax
    (dlight would inline the softmax into it three times, unvectorized); the batch matmul
    that reads it takes it as its A operand's prologue. Alone, it is a kernel."""
    graph, inputs = nan_guarded_softmax()
    assert kernels_of(graph, *inputs) == ["fused_add_softmax", "fused_isnan_where"]
    assert not np.isnan(evaluate(graph, *inputs)[0]).any()
    g = GraphBuilder("guard_pv")
    x, v = g.input("x", (2, 8, 16)), g.input("v", (2, 16, 4))
    p = g.op("softmax", x, axis=-1)
    p = g.op("where", g.op("isnan", p), g.const("zero", np.float32(0)), p)
    graph = g.finish(g.op("batch_matmul", p, v))
    assert kernels_of(graph, rand(2, 8, 16), rand(2, 16, 4)) == [
        "fused_softmax", "fused_isnan_where_batch_matmul"]


@pytest.mark.parametrize("spelling,attrs", [("tanh", {"approximate": "tanh"}), ("erf", {})])
def test_gelu_chains_become_the_matmul_epilogue(spelling, attrs):
    graph, inputs = gelu_after_matmul(spelling)
    assert kernels_of(graph, *inputs) == ["fused_matmul_gelu"]
    (gelu,) = [n for n in prepare(graph).nodes if n.op == "gelu"]
    assert gelu.attrs == attrs


@pytest.mark.parametrize("spelling", ["mul", "pow"])
def test_rms_norm_chain_becomes_rms_norm(spelling):
    graph, inputs = rms_norm_block(spelling)
    assert kernels_of(graph, *inputs) == ["fused_rms_norm"]
    assert ops_of(graph) == ["rms_norm"]


def test_attention_reads_heads_in_place():
    """Before: 16 kernels (3 projections, 5 copies, the NaN guard, 2 scalings of their own).
    After: q, k and v as one projection; one copy of k^T (read by rows, it must be
    contiguous); q k^T with the scale and mask as epilogue; the softmax; p v reading the NaN
    guard as its prologue; and the out projection reading the heads merged."""
    graph, inputs = attention_block("separate")
    assert kernels_of(graph, *inputs) == [
        "fused_matmul_add",
        "fused_slice_reshape_transpose_reshape_transpose",
        "fused_slice_reshape_transpose_reshape_batch_matmul_mul_add",
        "fused_softmax",
        "fused_slice_reshape_transpose_reshape_isnan_where_reshape_batch_matmul",
        "fused_transpose_reshape_matmul_add"]
    (merged,) = [n for n in prepare(graph).nodes if n.op == "matmul" and
                 n.output.shape == (L, 3 * E)]
    assert merged.inputs[1].is_const


def test_attention_op_reads_keys_transposed_once():
    graph, inputs = attention_op_block()
    assert kernels_of(graph, *inputs) == [
        "fused_matmul", "fused_slice_reshape_transpose_reshape_transpose",
        "fused_slice_reshape_transpose_reshape_batch_matmul_mul", "fused_softmax",
        "fused_slice_reshape_transpose_reshape_batch_matmul", "fused_transpose_reshape_matmul"]


def test_fused_qkv_projection_is_sliced_by_its_readers():
    graph, inputs = attention_block("fused")
    names = kernels_of(graph, *inputs)
    assert len(names) == 6 and not any(n == "fused_slice" for n in names)
    assert names[0] == "fused_matmul_add" and names[-1] == "fused_transpose_reshape_matmul_add"


def test_vit_qkv_split_and_unit_transposes_make_no_copy():
    graph, inputs = vit_attention_scores()
    # the (1, L, E) -> (L, 1, E) transpose is a view; q and k slice the projection directly
    names = kernels_of(graph, *inputs)
    assert names == ["fused_matmul", "fused_slice_reshape_transpose",
                     "fused_slice_reshape_transpose_batch_matmul", "fused_softmax"]


def test_scale_moves_after_the_matmul_only_when_it_feeds_it_alone():
    g = GraphBuilder("shared")
    a, b = g.input("a", (2, 4, 8)), g.input("b", (2, 8, 4))
    sa = g.op("mul", a, scalar=0.5)
    y = g.op("batch_matmul", sa, g.op("mul", b, g.const("s", np.float32(3))))
    graph = g.finish(y, sa)  # sa is an output too: it stays
    ops = ops_of(graph)
    assert ops.count("mul") == 2 and ops.index("batch_matmul") < len(ops) - 1
    kernels_of(graph, rand(2, 4, 8), rand(2, 8, 4, seed=1))


# ------------------------------------------------------------------ compiled
@pytest.mark.cc
@pytest.mark.parametrize("block", [nan_guarded_softmax, lambda: gelu_after_matmul("tanh"),
                                   lambda: rms_norm_block("mul"), attention_block,
                                   lambda: attention_block("fused"), vit_attention_scores,
                                   attention_op_block],
                         ids=["guard", "gelu", "rms", "attention", "qkv", "vit", "sdpa"])
def test_compiled_blocks_match_the_original_graph(block):
    graph, inputs = block()
    compiled_matches(graph, *inputs)


# ------------------------------------------------------------------ the zoo's bert_tiny
def test_zoo_bert_tiny_kernels(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    from looptune.frontend.onnx import from_onnx
    from looptune.testing import zoo
    net, inputs = zoo.build("bert_tiny")
    graph = from_onnx(zoo.export_onnx(net, inputs, tmp_path / "bert_tiny.onnx"))
    feeds = [t.numpy().astype(np.int32) if t.dtype == torch.int64 else t.numpy()
             for t in inputs]
    names = kernels_of(graph, *feeds)
    # 38 kernels before (2 layers): per layer 3 projections, 5 copies, the NaN guard and the
    # GELU chain were kernels of their own; now 10 per layer, 2 around them
    assert len(names) == 22
    assert not any(n in ("fused_transpose", "fused_isnan_where") for n in names)


def test_transposes_that_undo_each_other_are_a_view():
    """ViT's patches: NHWC -> NCHW -> (C, L) -> (L, C) leaves every byte where it was."""
    g = GraphBuilder("patches")
    x = g.input("x", (1, 4, 4, 8))
    t = g.op("transpose", g.op("reshape", g.op("transpose", x, perm=(0, 3, 1, 2)),
                               shape=(1, 8, 16)), perm=(0, 2, 1))
    y = g.op("relu", t)
    assert kernels_of(g.finish(y), rand(1, 4, 4, 8)) == ["fused_relu"]
    g2 = GraphBuilder("moved")  # (L, C) -> (C, L) -> (L, C) of another shape: a copy
    x = g2.input("x", (1, 16, 8))
    t = g2.op("transpose", g2.op("reshape", g2.op("transpose", x, perm=(0, 2, 1)),
                                 shape=(1, 16, 8)), perm=(0, 2, 1))
    assert kernels_of(g2.finish(g2.op("relu", t)), rand(1, 16, 8)) != ["fused_relu"]


def test_unary_ops_between_undoing_transposes_apply_in_place():
    """Whisper's: a convolution's NHWC output to NCHW, gelu, back to tokens (L, C), a residual
    add: the gelu and the add become the producer's epilogue, no copy."""
    g = GraphBuilder("whisper")
    x, r = g.input("x", (8, 4)), g.input("r", (1, 8, 16))
    m = g.op("reshape", g.op("matmul", x, g.const("w", rand(4, 16))), shape=(1, 1, 8, 16))
    t = g.op("gelu", g.op("transpose", m, perm=(0, 3, 1, 2)))
    t = g.op("transpose", g.op("reshape", t, shape=(1, 16, 8)), perm=(0, 2, 1))
    graph = g.finish(g.op("add", t, r))
    assert kernels_of(graph, rand(8, 4), rand(1, 8, 16, seed=1)) == ["fused_matmul_gelu_add"]


@pytest.mark.cc
def test_sibling_matmuls_merge_with_and_without_bias():
    """Whisper's k projection has no bias, q and v have: one matmul, zeros for k's bias."""
    g = GraphBuilder("siblings")
    x = g.input("x", (1, 8, 16))
    outs = []
    for i, bias in enumerate((True, False, True)):
        y = g.op("matmul", g.op("reshape", x, shape=(8, 16)), g.const(f"w{i}", rand(16, 8 + i)))
        outs.append(g.op("add", y, g.const(f"b{i}", rand(8 + i, seed=i))) if bias else y)
    graph = g.finish(*(g.op("relu", y) for y in outs))
    names = kernels_of(graph, rand(1, 8, 16))
    assert names[0] == "fused_matmul_add" and len(names) == 4  # and a relu of each slice
    compiled_matches(graph, rand(1, 8, 16))
