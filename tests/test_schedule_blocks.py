"""Block-level primitives on the operator library, alone and combined with the loop
primitives, checked against numpy in the interpreter and (with a C compiler) compiled."""
from __future__ import annotations

import re

import numpy as np
import pytest

import looptune as lt
from looptune import te
from looptune.codegen import lower
from looptune.runtime import have_compiler
from looptune.schedule import Schedule, ScheduleError
from looptune.te import ops
from looptune.tir import interpreter
from looptune.tir.functor import visit
from looptune.tir.stmt import Allocate

RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.uniform(-1, 1, shape).astype("float32")


def check(sch, inputs, expected, *, rtol=1e-4, atol=1e-5):
    """The schedule is right in the interpreter and, when there is a compiler, in C."""
    out_shape = expected.shape
    got = np.full(out_shape, np.nan, "float32")
    interpreter.run(lower(sch.func, vectorize=False), *inputs, got)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=str(sch.trace))
    if have_compiler():
        mod = lt.build(sch)
        got = np.full(out_shape, np.nan, "float32")
        mod(*inputs, got)
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=mod.source)
        return mod
    return None


# ---------------------------------------------------------------------------- workloads
def dense_relu(M, N, K):
    X = te.placeholder((M, K), name="X")
    W = te.placeholder((K, N), name="W")
    b = te.placeholder((N,), name="b")
    return [X, W, b, ops.dense(X, W, b, relu=True)]


def matmul_bias_relu(M, N, K):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    bias = te.placeholder((N,), name="bias")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((M, N), lambda i, j: C[i, j] + bias[j], name="D")
    E = te.compute((M, N), lambda i, j: te.max(D[i, j], 0.0), name="E")
    return te.create_prim_func([A, B, bias, E])


def conv(N=1, C=3, H=9, W=11, K=5, stride=1, pad=1):
    X = te.placeholder((N, C, H, W), name="X")
    Wt = te.placeholder((K, C, 3, 3), name="Wt")
    return [X, Wt, ops.conv2d_nchw(X, Wt, stride=stride, padding=pad)]


def conv_ref(x, w, stride=1, pad=1):
    from looptune.te.ops import reference
    return reference.conv2d_nchw(x, w, stride, pad, 1)


# ---------------------------------------------------------------------------- fusion
@pytest.mark.parametrize("shape", [(32, 32, 16), (30, 20, 13)])
def test_matmul_bias_relu_fused_into_a_register_tile(shape):
    M, N, K = shape
    func = matmul_bias_relu(M, N, K)
    sch = Schedule(func)
    sch.reverse_compute_inline(sch.get_block("E"))  # relu folded into the bias add
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 8])
    sch.reorder(i0, j0, k, i1, j1)
    acc = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(acc, j0)
    d = sch.get_block("D")
    sch.reverse_compute_at(d, j0)
    sch.reverse_compute_inline(d)  # bias + relu applied while writing the tile back
    sch.vectorize(j1)
    sch.unroll(i1)
    a, b, bias = rand(M, K), rand(K, N), rand(N)
    mod = check(sch, [a, b, bias], np.maximum(a @ b + bias, 0))
    if mod is not None:
        assert "float C_local[32]" in mod.source  # a 4x8 tile, not the whole matrix
        assert not re.search(r"\bC\b = \(float\*\)lt_alloc", mod.source)  # C is gone


def test_dense_with_cache_write_at_a_non_dividing_tile():
    X, W, b, out = dense_relu(7, 19, 11)
    func = te.create_prim_func([X, W, b, out])
    sch = Schedule(func)
    blk = sch.get_block("dense_matmul")
    i, j, k = sch.get_loops(blk)
    j0, j1 = sch.split(j, [None, 8])
    sch.reorder(i, j0, k, j1)
    acc = sch.cache_write(blk, 0, "local")
    sch.reverse_compute_at(acc, j0)
    x, w, bias = rand(7, 11), rand(11, 19), rand(19)
    check(sch, [x, w, bias], np.maximum(x @ w + bias, 0))


# ---------------------------------------------------------------------------- conv padding
def test_conv_padding_inlined():
    X, Wt, Y = conv()
    sch = Schedule(te.create_prim_func([X, Wt, Y]))
    sch.compute_inline(sch.get_block("pad"))
    assert not sch.has_block("pad") and "pad" not in sch.block_names()
    x, w = rand(1, 3, 9, 11), rand(5, 3, 3, 3)
    check(sch, [x, w], conv_ref(x, w))


@pytest.mark.parametrize("stride", [1, 2])
def test_conv_padding_computed_at_a_tile(stride):
    X, Wt, Y = conv(stride=stride)
    sch = Schedule(te.create_prim_func([X, Wt, Y]))
    cv = sch.get_block("conv2d_nchw")
    n, k, h, w, rc, rh, rw = sch.get_loops(cv)
    h0, h1 = sch.split(h, [None, 4])  # does not divide the output height
    w0, w1 = sch.split(w, [None, 3])
    sch.reorder(n, k, h0, w0, rc, h1, w1, rh, rw)
    sch.compute_at(sch.get_block("pad"), w0)
    x, wt = rand(1, 3, 9, 11), rand(5, 3, 3, 3)
    mod = check(sch, [x, wt], conv_ref(x, wt, stride))
    if mod is not None:
        m = re.search(r"float pad\[(\d+)\]", mod.source)
        assert m and int(m.group(1)) < 3 * 11 * 13  # a per-tile halo, not the whole image


def test_sample_compute_location_every_choice_is_correct():
    X, Wt, Y = conv()
    func = te.create_prim_func([X, Wt, Y])
    x, wt = rand(1, 3, 9, 11), rand(5, 3, 3, 3)
    want = conv_ref(x, wt)
    n_loops = len(Schedule(func).compute_locations("pad"))
    assert n_loops >= 4
    seen, legal = set(), 0
    for decision in list(range(n_loops)) + [-1, -2]:
        sch = Schedule(func)
        pad = sch.get_block("pad")
        loc = sch.sample_compute_location(pad, decision=decision)
        try:
            sch.compute_at(pad, loc)
        except ScheduleError:  # not every shared loop is legal; the compute_at says so
            continue
        legal += 1
        seen.add(sch.func.structural_hash())
        check(sch, [x, wt], want)
    assert legal >= 4 and len(seen) == legal


# ---------------------------------------------------------------------------- softmax, layer norm
def test_softmax_stages_computed_at_the_row_loop():
    X = te.placeholder((6, 13), name="X")
    out = ops.softmax(X)
    func = te.create_prim_func([X, out])
    sch = Schedule(func)
    last = sch.block_names()[-1]
    row = sch.get_loops(sch.get_block(last))[0]
    for name in [n for n in sch.block_names() if n not in ("root", last)][::-1]:
        sch.compute_at(sch.get_block(name), row)
    sch.parallel(row)
    x = rand(6, 13)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    check(sch, [x], e / e.sum(axis=1, keepdims=True))


def test_layer_norm_stats_computed_at_the_row_loop():
    X = te.placeholder((5, 17), name="X")
    g = te.placeholder((17,), name="g")
    b = te.placeholder((17,), name="b")
    out = ops.layer_norm(X, g, b)
    sch = Schedule(te.create_prim_func([X, g, b, out]))
    names = [n for n in sch.block_names() if n != "root"]
    row = sch.get_loops(sch.get_block(names[-1]))[0]
    for name in names[-2::-1]:
        sch.compute_at(sch.get_block(name), row)
    x, gg, bb = rand(5, 17), rand(17), rand(17)
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    check(sch, [x, gg, bb], (x - mu) / np.sqrt(var + 1e-5) * gg + bb, rtol=1e-3, atol=1e-4)


# ---------------------------------------------------------------------------- reductions
def test_rfactor_then_parallelize_the_partial_sums():
    X = te.placeholder((6, 100), name="X")
    k = te.reduce_axis(100, "k")
    S = te.compute((6,), lambda i: te.sum(X[i, k], axis=k), name="S")
    sch = Schedule(te.create_prim_func([X, S]))
    s = sch.get_block("S")
    i, kk = sch.get_loops(s)
    ko, ki = sch.split(kk, [None, 8])  # 13 x 8 covers 100: guarded
    rf = sch.rfactor(ko, 0)
    assert sch.get(rf).name == "S_rf"
    loops = sch.get_loops(rf)
    sch.reorder(loops[1], loops[0], loops[2])
    sch.parallel(sch.get_loops(rf)[0])  # ko drives a spatial variable of S_rf now
    x = rand(6, 100)
    check(sch, [x], x.sum(axis=1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_rfactor_matmul_any_axis(axis):
    func = matmul_bias_relu(8, 6, 20)
    sch = Schedule(func)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    k0, k1 = sch.split(k, [4, 5])
    sch.rfactor(k0, axis)
    a, b, bias = rand(8, 20), rand(20, 6), rand(6)
    check(sch, [a, b, bias], np.maximum(a @ b + bias, 0))


def test_decompose_reduction():
    func = matmul_bias_relu(12, 10, 7)
    sch = Schedule(func)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    j0, j1 = sch.split(j, [None, 4])
    sch.reorder(i, j0, k, j1)
    init = sch.decompose_reduction(c, k)
    assert sch.get(init).name == "C_init" and sch.get(c).init is None
    assert len(sch.get_loops(init)) == 3  # i, j0 and a copy of j1
    a, b, bias = rand(12, 7), rand(7, 10), rand(10)
    check(sch, [a, b, bias], np.maximum(a @ b + bias, 0))


# ---------------------------------------------------------------------------- caches, storage
@pytest.mark.cc
def test_cache_read_packs_a_panel_with_storage_align():
    func = matmul_bias_relu(16, 24, 12)
    sch = Schedule(func)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    j0, j1 = sch.split(j, [None, 8])
    sch.reorder(j0, i, k, j1)
    bp = sch.cache_read(c, 1, "global")
    sch.compute_at(bp, j0)
    sch.storage_align(bp, 0, 0, 16, 4)
    a, b, bias = rand(16, 12), rand(12, 24), rand(24)
    mod = check(sch, [a, b, bias], np.maximum(a @ b + bias, 0))
    # the panel is 12 x 8 floats with its row stride padded to 16k + 4 = 20: 11 * 20 + 8
    allocs = []
    visit(lower(sch.func).body, lambda n: allocs.append(n.buffer) if isinstance(n, Allocate)
          else None)
    assert [b.size for b in allocs if b.name == "B_global"] == [228]
    assert re.search(r"float B_global\[228\]", mod.source), mod.source


def conv_reference(x, w, stride, pad):
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - r) // stride + 1, (wd + 2 * pad - s) // stride + 1
    out = np.zeros((n, k, oh, ow), "float64")
    for dr in range(r):
        for ds in range(s):
            win = xp[:, :, dr:dr + stride * oh:stride, ds:ds + stride * ow:stride]
            out += np.einsum("nchw,kc->nkhw", win, w[:, :, dr, ds])
    return out.astype("float32")


def test_permute_layout_packs_a_conv_weight_panel_for_output_channel_vectors():
    """A [K][C][R][S] weight copied per output-channel tile as [C][R][S][16], and the
    accumulators kept with their output channel last: the vector loop over 16 output channels
    reads the panel and updates the accumulators contiguously."""
    tensors, _, _ = ops.workload("conv2d", N=1, C=8, H=10, W=10, K=32, R=3, S=3, stride=2,
                                 pad=1)
    sch = Schedule(te.create_prim_func(tensors))
    b = sch.get_block("conv2d_nchw")
    w = sch.cache_read(b, 1, "global")
    sch.permute_layout(w, 0, [1, 2, 3, 0])
    assert sch.get(w).writes[0].buffer.shape == (8, 3, 3, 32)
    # the copy walks the new layout: its loops (built from its variables) write contiguously
    assert [iv.extent for iv in sch.get(w).iter_vars] == [8, 3, 3, 32]
    n, k, p, q, c, r, s = sch.get_loops(b)
    ko, ki = sch.split(k, [None, 16])
    sch.reorder(n, ko, p, q, c, r, s, ki)
    sch.compute_at(w, ko)
    acc = sch.cache_write(b, 0, "local")  # the accumulators too: [N][Y][X][K]
    sch.permute_layout(b, 0, [0, 2, 3, 1])
    sch.reverse_compute_at(acc, q)
    sch.vectorize(ki)
    x, wt = rand(1, 8, 10, 10), rand(32, 8, 3, 3)
    mod = check(sch, [x, wt], conv_reference(x, wt, 2, 1))
    allocs = []
    visit(lower(sch.func).body, lambda n: allocs.append(n.buffer) if isinstance(n, Allocate)
          else None)
    assert [b.size for b in allocs if b.name == "W_global"] == [8 * 3 * 3 * 16]
    if mod is not None:  # whole-vector loads of the panel (16 lanes: 1 AVX-512 or 2 AVX2)
        assert re.search(r"\(const lt_float32x(8|16)_u\*\)\(W_global \+", mod.source), \
            mod.source
    from looptune.schedule import Trace
    from looptune.tir import structural_equal
    fresh = Schedule(te.create_prim_func(tensors))
    Trace.from_json(sch.trace.to_json()).apply_to_schedule(fresh)
    assert structural_equal(fresh.func, sch.func)
    fresh = Schedule(te.create_prim_func(tensors))
    exec(sch.trace.as_python(), {"sch": fresh})
    assert structural_equal(fresh.func, sch.func)
    with pytest.raises(ScheduleError, match="permutation"):
        sch.permute_layout(w, 0, [0, 1, 2])
    with pytest.raises(ScheduleError, match="only intermediate buffers"):
        sch.permute_layout(acc, 0, [0, 1, 3, 2])


def test_set_scope_and_add_unit_loop():
    func = matmul_bias_relu(8, 8, 8)
    sch = Schedule(func)
    sch.set_scope(sch.get_block("C"), 0, "local")
    assert sch.get(sch.get_block("C")).writes[0].buffer.scope == "local"
    sch.add_unit_loop(sch.get_block("D"))
    assert len(sch.get_loops(sch.get_block("D"))) == 3
    a, b, bias = rand(8, 8), rand(8, 8), rand(8)
    check(sch, [a, b, bias], np.maximum(a @ b + bias, 0))


def test_every_new_primitive_round_trips_and_replays():
    from looptune.schedule import Trace
    from looptune.tir import structural_equal
    func = matmul_bias_relu(20, 24, 13)
    sch = Schedule(func, seed=3)
    sch.reverse_compute_inline(sch.get_block("E"))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, sch.sample_perfect_tile(j, 2, 8))
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(i0, j0, k0, i1, k1, j1)
    acc = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(acc, j0)
    ar = sch.cache_read(c, 0, "global")
    sch.compute_at(ar, k0)
    sch.storage_align(ar, 0, 0, 8, 1)
    sch.decompose_reduction(c, k0)
    d = sch.get_block("D")
    sch.reverse_compute_at(d, j0)
    sch.reverse_compute_inline(d)
    sch.set_scope(ar, 0, "local")
    js = sch.trace.to_json()
    fresh = Schedule(func)
    Trace.from_json(js).apply_to_schedule(fresh)
    assert structural_equal(fresh.func, sch.func)
    fresh2 = Schedule(func)
    exec(sch.trace.as_python(), {"sch": fresh2})
    assert structural_equal(fresh2.func, sch.func)
    a, b, bias = rand(20, 13), rand(13, 24), rand(24)
    check(fresh, [a, b, bias], np.maximum(a @ b + bias, 0))
