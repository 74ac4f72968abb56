"""The operator library, pure-Python tier: every registered workload and every operator
variant run through the reference interpreter and compared with its numpy reference; the
nontrivial numpy references are themselves checked against independent formulations (and
against torch when it is installed)."""
import math

import numpy as np
import pytest

from looptune import te
from looptune.te import ops
from looptune.te.ops import reference as ref
from looptune.tir import interpreter

# Small shapes for every registered op: odd sizes (7, 13) that tile factors would not divide.
SMALL = {
    "matmul": dict(M=7, N=13, K=5),
    "matmul_add": dict(M=7, N=6, K=13),
    "batch_matmul": dict(batch=3, M=7, N=5, K=6),
    "dense": dict(batch=3, in_features=13, out_features=7),
    "conv2d": dict(N=1, C=3, H=7, W=9, K=4, R=3, S=3, stride=1, pad=1, dilation=1),
    "conv2d_nhwc": dict(N=1, C=3, H=7, W=9, K=4, R=3, S=3, stride=2, pad=1, dilation=1),
    "depthwise_conv2d": dict(N=2, C=3, H=7, W=9, R=3, S=3, stride=1, pad=1),
    "max_pool2d": dict(N=1, C=3, H=7, W=13, kernel=3, stride=2, pad=1),
    "avg_pool2d": dict(N=1, C=3, H=7, W=13, kernel=3, stride=2, pad=1),
    "softmax": dict(M=7, N=13),
    "layer_norm": dict(M=7, N=13),
    "relu": dict(N=1, C=3, H=7, W=5),
    "gelu": dict(M=7, N=13),
    "add": dict(N=2, C=3, H=7, W=5),
    "reduce_sum": dict(M=7, N=13),
    "matmul_u8s8": dict(M=7, N=13, K=9),
}


def random_array(rng, shape, dtype="float32"):
    """Never zeros: a kernel that forgets an input or an init must show up."""
    if dtype in ("uint8", "int8"):  # their whole range
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    if dtype.startswith("int"):
        return rng.integers(-5, 6, size=shape).astype(dtype)
    return rng.uniform(-1, 1, size=shape).astype(dtype)


def run_te(tensors, inputs):
    """Build the PrimFunc of [inputs..., output] and interpret it on the input arrays."""
    func = te.create_prim_func(tensors)
    out = np.full(tensors[-1].shape, np.nan, dtype=tensors[-1].dtype)
    interpreter.run(func, *inputs, out)
    return out


def check_op(fn, reference, *specs, rtol=1e-5, atol=1e-5, seed=0, **kw):
    """fn(*placeholders, **kw) against reference(*arrays, **kw); a spec is a shape or
    (shape, dtype)."""
    rng = np.random.default_rng(seed)
    specs = [s if isinstance(s[-1], str) else (s, "float32") for s in specs]
    phs = [te.placeholder(shape, dtype, name=n) for (shape, dtype), n in zip(specs, "ABCDE")]
    out = fn(*phs, **kw)
    arrays = [random_array(rng, shape, dtype) for shape, dtype in specs]
    got = run_te([*phs, out], arrays)
    want = reference(*arrays, **kw)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return got


# ----------------------------------------------------------------------------- registry
def test_every_registered_op_has_a_small_test_shape():
    assert set(SMALL) == set(ops.OPS)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_registered_op_matches_reference(name):
    tensors, reference, flops = ops.workload(name, **SMALL[name])
    assert isinstance(flops, int) and flops > 0
    rng = np.random.default_rng(1)
    inputs = [random_array(rng, t.shape, t.dtype) for t in tensors[:-1]]
    got = run_te(tensors, inputs)
    np.testing.assert_allclose(got, reference(*inputs), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_default_shapes_build_and_reference_agrees_on_shape(name):
    op = ops.get_op(name)
    tensors, reference, flops = ops.workload(name)
    assert op.doc and flops > 0
    rng = np.random.default_rng(2)
    out = reference(*(random_array(rng, t.shape, t.dtype) for t in tensors[:-1]))
    assert out.shape == tensors[-1].shape and out.dtype == np.dtype(tensors[-1].dtype)


def test_default_flops():
    assert ops.workload("matmul")[2] == 2 * 512 ** 3
    assert ops.workload("conv2d")[2] == 2 * 64 * 56 * 56 * 64 * 9
    assert ops.workload("conv2d", stride=2)[2] == 2 * 64 * 28 * 28 * 64 * 9
    assert ops.workload("dense")[2] == 2 * 256 * 785


def test_workload_rejects_unknown_parameters_and_names():
    with pytest.raises(te.TEError, match=r"unknown parameter\(s\) L.*M=512, N=512, K=512"):
        ops.workload("matmul", L=3)
    with pytest.raises(te.TEError, match="unknown operator 'matmull'.*batch_matmul.*matmul"):
        ops.get_op("matmull")
    with pytest.raises(te.TEError, match="already registered"):
        ops.register_op(ops.get_op("matmul"))


# ----------------------------------------------------------------------------- linalg
@pytest.mark.parametrize("ta, tb, sa, sb", [
    (False, False, (7, 5), (5, 13)), (True, False, (5, 7), (5, 6)),
    (False, True, (7, 5), (6, 5)), (True, True, (5, 7), (13, 5))])
def test_matmul_transposes(ta, tb, sa, sb):
    check_op(ops.matmul, ref.matmul, sa, sb, transpose_a=ta, transpose_b=tb)


def test_batch_matmul_broadcasts_a_batch_of_one():
    check_op(ops.batch_matmul, ref.batch_matmul, (1, 4, 5), (3, 5, 6))
    check_op(ops.batch_matmul, ref.batch_matmul, (3, 4, 5), (1, 5, 6))


@pytest.mark.parametrize("bias, relu", [(False, False), (True, False), (False, True)])
def test_dense_variants(bias, relu):
    specs = [(3, 13), (13, 7)] + ([(7,)] if bias else [])
    check_op(lambda *t: ops.dense(*t, relu=relu), lambda *a: ref.dense(*a, relu=relu), *specs)


def test_stages_are_separate():
    """Reductions sit in their own stage so the epilogue can be fused or inlined."""
    X, W, b = (te.placeholder(s, name=n) for s, n in [((2, 3), "X"), ((3, 4), "W"), ((4,), "b")])
    out = ops.dense(X, W, b, relu=True)
    assert out.op.reduce_axis == () and out.op.inputs[0].op.reduce_axis
    C = te.placeholder((2, 4), name="C")
    assert ops.matmul_add(X, W, C).op.inputs[0].op.tag == "matmul"
    assert ops.conv2d_nchw(te.placeholder((1, 2, 5, 5)), te.placeholder((3, 2, 3, 3)),
                           padding=1).op.inputs[0].op.tag == "pad"


# ----------------------------------------------------------------------------- nn
CONV_VARIANTS = [
    dict(stride=2), dict(dilation=2), dict(padding=(1, 2)), dict(stride=(2, 1), padding=0),
    dict(stride=2, padding=2, dilation=(2, 1)),
]


@pytest.mark.parametrize("kw", CONV_VARIANTS)
def test_conv2d_nchw_variants(kw):
    check_op(ops.conv2d_nchw, ref.conv2d_nchw, (2, 3, 7, 8), (4, 3, 3, 2), rtol=1e-4, **kw)


@pytest.mark.parametrize("kw", CONV_VARIANTS)
def test_conv2d_nhwc_variants(kw):
    check_op(ops.conv2d_nhwc, ref.conv2d_nhwc, (1, 7, 8, 3), (3, 2, 3, 4), rtol=1e-4, **kw)


@pytest.mark.parametrize("kw", CONV_VARIANTS)
def test_depthwise_conv2d_variants(kw):
    check_op(ops.depthwise_conv2d_nchw, ref.depthwise_conv2d_nchw, (1, 3, 7, 8), (3, 2, 3, 3),
             rtol=1e-4, **kw)


@pytest.mark.parametrize("kernel, stride, padding", [
    (2, None, 0), (3, 1, 1), ((3, 2), (2, 1), (1, 1)), (3, 2, 0)])
@pytest.mark.parametrize("pool", ["max", "avg"])
def test_pool_variants(pool, kernel, stride, padding):
    fn, rf = (ops.max_pool2d, ref.max_pool2d) if pool == "max" else (ops.avg_pool2d,
                                                                      ref.avg_pool2d)
    check_op(fn, rf, (2, 3, 7, 9), kernel=kernel, stride=stride, padding=padding)


def test_pad():
    got = check_op(ops.pad, lambda a, **kw: np.pad(
        a, ((1, 2), (0, 3)), constant_values=1.5), (3, 4), pad_before=[1, 0], pad_after=[2, 3],
                   value=1.5)
    assert got.shape == (6, 7)


# ----------------------------------------------------------------------------- norm
@pytest.mark.parametrize("shape, axis", [((7, 13), -1), ((7, 5), 0), ((2, 5, 3), 1), ((13,), 0)])
def test_softmax_variants(shape, axis):
    check_op(ops.softmax, ref.softmax, shape, axis=axis)


def test_softmax_is_numerically_stable():
    X = te.placeholder((2, 5), name="X")
    x = np.array([[1000.0, 1001, 999, 1000, 1002], [-1000, -1001, -999, -1000, -1002]], "float32")
    got = run_te([X, ops.softmax(X)], [x])
    np.testing.assert_allclose(got, ref.softmax(x), rtol=1e-5)
    assert np.isfinite(got).all()


@pytest.mark.parametrize("shape, affine", [((7, 13), True), ((2, 3, 7), False), ((13,), True)])
def test_layer_norm_variants(shape, affine):
    n = shape[-1]
    specs = [shape, (n,), (n,)] if affine else [shape]
    check_op(ops.layer_norm, ref.layer_norm, *specs, rtol=1e-4, atol=1e-4, eps=1e-3)


def test_max_identity_is_finite():
    """min_value is the lowest finite float (as in TVM), so max reductions and -inf padding
    print as plain literals in the interpreter and in generated C."""
    assert te.min_value("float32").value == -float(np.finfo(np.float32).max)
    X = te.placeholder((2, 3), name="X")
    x = np.full((2, 3), -1e30, "float32")
    np.testing.assert_array_equal(run_te([X, ops.reduce_max(X, axis=1)], [x]), x[:, 0])


# ----------------------------------------------------------------------------- elementwise
@pytest.mark.parametrize("fn, rf, sa, sb", [
    (ops.add, ref.add, (3, 1, 5), (4, 5)), (ops.add, ref.add, (4, 5), (3, 1, 5)),
    (ops.multiply, ref.multiply, (4, 1), (1, 6)), (ops.add, ref.add, (2, 3), (2, 3)),
    (ops.multiply, ref.multiply, (5,), (2, 3, 1))])
def test_broadcasting_binary_ops(fn, rf, sa, sb):
    check_op(fn, rf, sa, sb)


def test_binary_ops_with_a_scalar():
    check_op(lambda a: ops.add(a, 2.5), lambda a: ref.add(a, np.float32(2.5)), (3, 4))
    check_op(lambda a: ops.multiply(3.0, a), lambda a: ref.multiply(a, np.float32(3)), (3, 4))


@pytest.mark.parametrize("fn, rf", [(ops.relu, ref.relu), (ops.gelu, ref.gelu)])
def test_unary_ops(fn, rf):
    check_op(fn, rf, (2, 3, 5), rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- reduction
@pytest.mark.parametrize("name", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("axis, keepdims", [
    (None, False), (None, True), (1, False), (-1, True), ((0, 2), False), ((2, 0), True)])
def test_reductions(name, axis, keepdims):
    fn, rf = getattr(ops, "reduce_" + name), getattr(ref, "reduce_" + name)
    check_op(fn, rf, (3, 4, 5), axis=axis, keepdims=keepdims, rtol=1e-5, atol=1e-6)


def test_reduce_mean_of_integers_is_float32():
    got = check_op(ops.reduce_mean, ref.reduce_mean, ((3, 4), "int32"), axis=1)
    assert got.dtype == np.float32


# ----------------------------------------------------------------------------- references
def conv2d_loops(x, w, stride, padding, dilation):
    """conv2d NCHW by its definition, one output element at a time (tiny shapes only)."""
    (sh, sw), (ph, pw), (dh, dw) = (ref._pair(v) for v in (stride, padding, dilation))
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    OH, OW = ref._out(H, R, sh, ph, dh), ref._out(W, S, sw, pw, dw)
    out = np.zeros((N, K, OH, OW))
    for n, k, y, xx, c, r, s in np.ndindex(N, K, OH, OW, C, R, S):
        iy, ix = y * sh + r * dh - ph, xx * sw + s * dw - pw
        if 0 <= iy < H and 0 <= ix < W:
            out[n, k, y, xx] += float(x[n, c, iy, ix]) * float(w[k, c, r, s])
    return out


@pytest.mark.parametrize("kw", [dict(stride=1, padding=0, dilation=1)] + [
    dict(dict(stride=1, padding=0, dilation=1), **v) for v in CONV_VARIANTS])
def test_conv_references_against_loops(kw):
    rng = np.random.default_rng(3)
    x, w = rng.uniform(-1, 1, (2, 3, 7, 8)), rng.uniform(-1, 1, (4, 3, 3, 2))
    want = conv2d_loops(x, w, **kw)
    np.testing.assert_allclose(ref.conv2d_nchw(x, w, **kw), want, rtol=1e-12, atol=1e-12)
    nhwc = ref.conv2d_nhwc(x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0), **kw)
    np.testing.assert_allclose(nhwc, want.transpose(0, 2, 3, 1), rtol=1e-12, atol=1e-12)
    # depthwise = a conv per channel with the other channels' filters zeroed
    wd = rng.uniform(-1, 1, (3, 2, 3, 2))
    dense_w = np.zeros((6, 3, 3, 2))
    for c, q in np.ndindex(3, 2):
        dense_w[c * 2 + q, c] = wd[c, q]
    np.testing.assert_allclose(ref.depthwise_conv2d_nchw(x, wd, **kw),
                               conv2d_loops(x, dense_w, **kw), rtol=1e-12, atol=1e-12)


def test_conv_reference_against_sliding_window_einsum():
    rng = np.random.default_rng(4)
    x, w = rng.uniform(-1, 1, (2, 3, 9, 8)), rng.uniform(-1, 1, (5, 3, 3, 3))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (2, 2)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::2, ::1]
    want = np.einsum("ncyxrs,kcrs->nkyx", win, w)
    got = ref.conv2d_nchw(x, w, stride=(2, 1), padding=(1, 2))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kernel, stride, padding", [(2, None, 0), (3, 2, 1), ((3, 2), 1, (1, 1))])
def test_pool_references_against_loops(kernel, stride, padding):
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (1, 2, 7, 6))
    (kh, kw), (ph, pw) = ref._pair(kernel), ref._pair(padding)
    sh, sw = ref._pair(kernel if stride is None else stride)
    OH, OW = ref._out(7, kh, sh, ph, 1), ref._out(6, kw, sw, pw, 1)
    mx, avg = np.full((1, 2, OH, OW), -np.inf), np.zeros((1, 2, OH, OW))
    for n, c, y, xx, r, s in np.ndindex(1, 2, OH, OW, kh, kw):
        iy, ix = y * sh + r - ph, xx * sw + s - pw
        if 0 <= iy < 7 and 0 <= ix < 6:
            mx[n, c, y, xx] = max(mx[n, c, y, xx], x[n, c, iy, ix])
            avg[n, c, y, xx] += x[n, c, iy, ix] / (kh * kw)
    np.testing.assert_allclose(ref.max_pool2d(x, kernel, stride, padding), mx, rtol=1e-12)
    np.testing.assert_allclose(ref.avg_pool2d(x, kernel, stride, padding), avg, rtol=1e-12)


def test_norm_and_gelu_references_against_direct_formulas():
    rng = np.random.default_rng(6)
    x = rng.uniform(-3, 3, (4, 9))
    e = np.exp(x)
    np.testing.assert_allclose(ref.softmax(x), e / e.sum(1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(ref.softmax(x, axis=0), e / e.sum(0, keepdims=True), rtol=1e-12)
    g, b = rng.uniform(-1, 1, 9), rng.uniform(-1, 1, 9)
    want = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(ref.layer_norm(x, g, b), want, rtol=1e-12)
    erf = np.array([math.erf(v / math.sqrt(2)) for v in x.ravel()]).reshape(x.shape)
    np.testing.assert_allclose(ref.gelu(x), 0.5 * x * (1 + erf), rtol=1e-12)


# ----------------------------------------------------------------------------- torch
def test_references_against_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(7)
    x, w = rng.uniform(-1, 1, (2, 4, 9, 8)), rng.uniform(-1, 1, (5, 4, 3, 2))
    tx = torch.from_numpy(x)
    for kw in [dict(stride=1, padding=0, dilation=1)] + [
            dict(dict(stride=1, padding=0, dilation=1), **v) for v in CONV_VARIANTS]:
        want = F.conv2d(tx, torch.from_numpy(w), **kw).numpy()
        np.testing.assert_allclose(ref.conv2d_nchw(x, w, **kw), want, rtol=1e-10, atol=1e-12)
        wd = rng.uniform(-1, 1, (4, 2, 3, 3))
        want = F.conv2d(tx, torch.from_numpy(wd.reshape(8, 1, 3, 3)), groups=4, **kw).numpy()
        np.testing.assert_allclose(ref.depthwise_conv2d_nchw(x, wd, **kw), want, rtol=1e-10,
                                   atol=1e-12)
    for k, s, p in [(2, None, 0), (3, 2, 1), ((3, 2), (2, 1), (1, 1))]:
        np.testing.assert_allclose(ref.max_pool2d(x, k, s, p),
                                   F.max_pool2d(tx, k, s, p).numpy(), rtol=1e-12)
        np.testing.assert_allclose(ref.avg_pool2d(x, k, s, p),
                                   F.avg_pool2d(tx, k, s, p, count_include_pad=True).numpy(),
                                   rtol=1e-12)
    np.testing.assert_allclose(ref.softmax(x, axis=1), F.softmax(tx, dim=1).numpy(), rtol=1e-12)
    g, b = torch.from_numpy(w.ravel()[:8]), torch.from_numpy(w.ravel()[8:16])
    np.testing.assert_allclose(ref.layer_norm(x, g.numpy(), b.numpy()),
                               F.layer_norm(tx, (8,), g, b, eps=1e-5).numpy(), rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_allclose(ref.gelu(x), F.gelu(tx).numpy(), rtol=1e-10, atol=1e-12)
