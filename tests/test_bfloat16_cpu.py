"""bfloat16 in CPU C: stored as its bits (uint16_t), cast through float32, computed in float32
and rounded back after each operation; results bit-exact against ml_dtypes and the interpreter
where numpy's are exact, within float32 tolerances for sums."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune import te
from looptune.codegen.c import bf16_bits
from looptune.schedule import Schedule
from looptune.target import host
from looptune.tir import interpreter

ml_dtypes = pytest.importorskip("ml_dtypes")
# numpy's own casts and comparisons of NaN and inf, on purpose
pytestmark = [pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")]
BF16 = ml_dtypes.bfloat16
LANES = host().vector_bits // 32  # float32 lanes of one vector register

# float32 bit patterns where rounding to bfloat16 is easy to get wrong
EDGES = np.array([
    0x3F808000, 0x3F818000,  # ties: to the even neighbour, down then up
    0x3F808001, 0x3F807FFF, 0xBF818000,  # just over and under a tie; a negative tie
    0x7F7FFFFF, 0x7F7F7FFF, 0xFF7F8000,  # rounds to inf; to the largest finite; a tie to -inf
    0x7F800000, 0xFF800000, 0x80000000,  # inf, -inf, -0.0
    0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA12345, 0xFF812345,  # quiet and signaling NaNs
    0x00000001, 0x00008000, 0x00018000, 0x007FFFFF, 0x80408000,  # subnormals (ties, carry)
], np.uint32).view(np.float32)


def bits(x) -> np.ndarray:
    return np.asarray(x).view(np.uint16 if np.asarray(x).itemsize == 2 else np.uint32)


def random_f32(rng, n) -> np.ndarray:
    """Non-zero float32 over many binades, with EDGES at the front."""
    x = (rng.choice([-1, 1], n) * rng.uniform(0.5, 1, n) * 2.0 ** rng.integers(-40, 40, n))
    x = x.astype("float32")
    x[:len(EDGES)] = EDGES
    return x


def random_bf16(rng, n) -> np.ndarray:
    """Every kind of bfloat16 bit pattern (NaNs, infinities and subnormals among them)."""
    return rng.integers(1, 1 << 16, n).astype(np.uint16).view(BF16)


def elementwise(fn, dtypes, out_dtype, n=256):
    ins = [te.placeholder((n,), d, name="AB"[i]) for i, d in enumerate(dtypes)]
    out = te.compute((n,), lambda i: fn(*(x[i] for x in ins)), name="C")
    if out.dtype != out_dtype:
        raise AssertionError(f"{out.dtype} != {out_dtype}")
    return te.create_prim_func([*ins, out])


def scheduled(func, block="C", *, vector: bool):
    sch = Schedule(func)
    if vector:
        i = sch.get_loops(sch.get_block(block))[-1]
        sch.vectorize(sch.split(i, [None, 2 * LANES])[1])
    return sch


def build_and_run(func, *args, vector: bool, out):
    """`func` built (its last loop vectorized or not) and run on `args`; also run by the
    interpreter, whose output is returned second."""
    mod = lt.build(scheduled(func, vector=vector), target="cpu")
    got = out.copy()
    mod(*args, got)
    want = out.copy()
    interpreter.run(func, *args, want)
    return mod, got, want


@pytest.mark.parametrize("v", [0.1, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -3e38, 1e39, float("nan"),
                               float("-inf"), -0.0, 1e-40])
def test_constants_round_as_ml_dtypes_does(v):
    assert bf16_bits(v) == int(bits(np.array(v).astype(BF16)))


@pytest.mark.cc
@pytest.mark.parametrize("vector", [False, True])
def test_float32_to_bfloat16_is_bit_exact(vector, rng):
    func = elementwise(lambda a: a.astype("bfloat16"), ["float32"], "bfloat16")
    a = random_f32(rng, 256)
    mod, got, want = build_and_run(func, a, vector=vector,
                                   out=np.full(256, 0xFFFF, np.uint16).view(BF16))
    assert ("lt_f32x" in mod.source) == vector
    np.testing.assert_array_equal(bits(got), bits(a.astype(BF16)))
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.cc
@pytest.mark.parametrize("vector", [False, True])
def test_bfloat16_to_float32_is_bit_exact(vector, rng):
    func = elementwise(lambda a: a.astype("float32"), ["bfloat16"], "float32")
    a = random_bf16(rng, 256)
    mod, got, want = build_and_run(func, a, vector=vector, out=np.full(256, np.nan, "float32"))
    assert ("lt_bf16x" in mod.source) == vector
    np.testing.assert_array_equal(bits(got), bits(a.astype("float32")))
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.cc
@pytest.mark.parametrize("other", ["float64", "float16", "int32"])
@pytest.mark.parametrize("vector", [False, True])
def test_casts_between_bfloat16_and_other_types_go_through_float32(other, vector, rng):
    """other -> bfloat16 rounds once the float32 value (as ml_dtypes does: a float64 or a
    large int32 is rounded twice); bfloat16 -> other is exact, or truncates to an int32."""
    to_bf16 = elementwise(lambda b: b.astype("bfloat16"), [other], "bfloat16")
    from_bf16 = elementwise(lambda a: a.astype(other), ["bfloat16"], other)
    if other == "int32":
        b = rng.choice([-1, 1], 256) * rng.integers(1, 1 << 30, 256)
    else:
        b = rng.uniform(-1, 1, 256) * 2.0 ** rng.integers(-12, 15, 256)
    b = b.astype(other)
    _, got, want = build_and_run(to_bf16, b, vector=vector,
                                 out=np.full(256, 0xFFFF, np.uint16).view(BF16))
    np.testing.assert_array_equal(bits(got), bits(b.astype(BF16)))
    np.testing.assert_array_equal(bits(got), bits(want))
    a = rng.uniform(-1000, 1000, 256).astype(BF16)
    _, got, want = build_and_run(from_bf16, a, vector=vector, out=np.full(256, 7, other))
    np.testing.assert_array_equal(got, a.astype(other))
    np.testing.assert_array_equal(got, want)


def matmul_bf16(M=24, N=32, K=40, *, b_transposed: bool, out_dtype="float32"):
    """C = A B (or A B^T) on bfloat16 operands, summed in float32; D = C cast to out_dtype."""
    A = te.placeholder((M, K), "bfloat16", name="A")
    B = te.placeholder((N, K) if b_transposed else (K, N), "bfloat16", name="B")
    k = te.reduce_axis(K, "k")
    b = (lambda j: B[j, k]) if b_transposed else (lambda j: B[k, j])
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("float32")
                                               * b(j).astype("float32"), axis=k), name="C")
    if out_dtype == "float32":
        return te.create_prim_func([A, B, C])
    D = te.compute((M, N), lambda i, j: C[i, j].astype(out_dtype), name="D")
    return te.create_prim_func([A, B, D])


def vectorized_matmul(func):
    """j innermost and vectorized, under k: A[i, k] is a broadcast, B's row a vector (or a
    gather of one element per row of B^T)."""
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    j0, j1 = sch.split(j, [None, LANES])
    sch.reorder(i, j0, k, j1)
    sch.vectorize(j1)
    if "D" in [b.name for b in func.params]:
        sch.reverse_compute_at(sch.get_block("D"), j0)
        sch.vectorize(sch.get_loops(sch.get_block("D"))[-1])
    return sch


@pytest.mark.cc
@pytest.mark.parametrize("b_transposed", [False, True])
@pytest.mark.parametrize("vector", [False, True])
def test_bfloat16_matmul_summed_in_float32(b_transposed, vector, rng):
    func = matmul_bf16(b_transposed=b_transposed)
    mod = lt.build(vectorized_matmul(func) if vector else Schedule(func), target="cpu")
    assert (f"lt_bf16x{LANES}_to_f32x{LANES}" in mod.source) == vector
    a = rng.uniform(-2, 2, (24, 40)).astype(BF16)
    b = rng.uniform(-2, 2, (32, 40) if b_transposed else (40, 32)).astype(BF16)
    c = np.full((24, 32), np.nan, "float32")
    mod(a, b, c)
    bt = b.astype("float32").T if b_transposed else b.astype("float32")
    np.testing.assert_allclose(c, a.astype("float32") @ bt, rtol=1e-5, atol=1e-5)
    want = np.full((24, 32), np.nan, "float32")
    interpreter.run(func, a, b, want)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


@pytest.mark.cc
@pytest.mark.parametrize("vector", [False, True])
def test_bfloat16_matmul_with_a_bfloat16_output(vector, rng):
    func = matmul_bf16(b_transposed=True, out_dtype="bfloat16")
    mod = lt.build(vectorized_matmul(func) if vector else Schedule(func), target="cpu")
    assert (f"lt_f32x{LANES}_to_bf16x{LANES}" in mod.source) == vector
    a = rng.uniform(-2, 2, (24, 40)).astype(BF16)
    b = rng.uniform(-2, 2, (32, 40)).astype(BF16)
    d = np.full((24, 32), 0xFFFF, np.uint16).view(BF16)
    mod(a, b, d)
    want = a.astype("float32") @ b.astype("float32").T
    # one bfloat16 rounding apart at most: 2**-8 of the value
    np.testing.assert_allclose(d.astype("float32"), want, rtol=2 ** -8, atol=1e-5)


@pytest.mark.cc
@pytest.mark.parametrize("vector", [False, True])
def test_bfloat16_arithmetic_rounds_after_each_operation(vector, rng):
    """relu(a * b + a * 0.1) + min(a, b) in bfloat16: as numpy with ml_dtypes computes it (each
    operation in float32, its result rounded), bit for bit."""
    func = elementwise(lambda a, b: te.max(a * b + a * 0.1, 0.0) + te.min(a, b),
                       ["bfloat16"] * 2, "bfloat16")
    a, b = (rng.uniform(-4, 4, 256).astype(BF16) for _ in range(2))
    a[:4], b[:4] = [np.inf, -np.inf, np.nan, 3], [1, 1, 1, np.nan]
    mod, got, want = build_and_run(func, a, b, vector=vector,
                                   out=np.full(256, 0xFFFF, np.uint16).view(BF16))
    assert ("lt_f32x" in mod.source) == vector
    ref = np.maximum(a * b + a * BF16(0.1), BF16(0)) + np.minimum(a, b)
    np.testing.assert_array_equal(bits(got), bits(ref))
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.cc
def test_bfloat16_comparisons_compare_values_not_bits(rng):
    """-0.0 == 0.0 and NaN != NaN, which comparing the bits would get wrong."""
    func = elementwise(lambda a, b: te.if_then_else(a == b, a - b, te.if_then_else(a < b, a, b)),
                       ["bfloat16"] * 2, "bfloat16")
    a, b = (rng.uniform(-4, 4, 256).astype(BF16) for _ in range(2))
    a[:4], b[:4] = [-0.0, np.nan, 2, 1.5], [0.0, np.nan, 2, -1]
    _, got, want = build_and_run(func, a, b, vector=False,
                                 out=np.full(256, 0xFFFF, np.uint16).view(BF16))
    ref = np.where(a == b, a - b, np.where(a < b, a, b))
    np.testing.assert_array_equal(bits(got), bits(ref))
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.cc
def test_bfloat16_math_calls_compute_in_float32(rng):
    func = elementwise(lambda a: te.exp(a) + te.sqrt(te.abs(a)), ["bfloat16"], "bfloat16")
    a = rng.uniform(-4, 4, 256).astype(BF16)
    _, got, want = build_and_run(func, a, vector=False,
                                 out=np.full(256, 0xFFFF, np.uint16).view(BF16))
    ref = np.exp(a) + np.sqrt(np.abs(a))
    # libm's expf and numpy's may differ in float32's last bit, rarely a bfloat16's
    np.testing.assert_allclose(got.astype("float32"), ref.astype("float32"), rtol=2 ** -7)
    np.testing.assert_allclose(got.astype("float32"), want.astype("float32"), rtol=2 ** -7)


@pytest.mark.cc
def test_stride_two_bfloat16_loads_shuffle_16_bit_lanes(rng):
    """y[i] = x[2i + 1]: two vector loads and a shuffle, whose mask has 16-bit lanes too."""
    n = 4 * LANES
    X = te.placeholder((2 * n + 1,), "bfloat16", name="X")
    Y = te.compute((n,), lambda i: X[2 * i + 1].astype("float32"), name="C")
    mod, got, want = build_and_run(te.create_prim_func([X, Y]), random_bf16(rng, 2 * n + 1),
                                   vector=True, out=np.full(n, np.nan, "float32"))
    assert f"lt_load2_bfloat16x{LANES}" in mod.source
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.cc
@pytest.mark.skipif("avx512_bf16" not in host().features, reason="needs AVX512-BF16")
def test_bf16_dot_intrinsic_takes_the_bits(rng):
    """x86_dot_bf16_16x2's C takes uint16_t pointers: the kernel's bfloat16 buffers are
    those."""
    M, N, K = 4, 32, 8
    A = te.placeholder((M, K), "bfloat16", name="A")
    B = te.placeholder((K // 2, N, 2), "bfloat16", name="B")  # [K / 2][N][2]: packed pairs
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(
        A[i, k].astype("float32") * B[k // 2, j, k % 2].astype("float32"), axis=k), name="C")
    sch = Schedule(te.create_prim_func([A, B, C]))
    i, j, k = sch.get_loops(sch.get_block("C"))
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(k, [None, 2])
    sch.reorder(i, j0, k0, j1, k1)
    sch.decompose_reduction(sch.get_block("C"), k0)
    sch.tensorize(j1, "x86_dot_bf16_16x2")
    mod = lt.build(sch, target="cpu")
    assert "lt_intrin_x86_dot_bf16_16x2(&C[" in mod.source
    a = rng.uniform(-1, 1, (M, K)).astype(BF16)
    b = rng.uniform(-1, 1, (K // 2, N, 2)).astype(BF16)
    c = np.full((M, N), np.nan, "float32")
    mod(a, b, c)
    want = a.astype("float32") @ b.astype("float32").transpose(0, 2, 1).reshape(K, N)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
