"""looptune.tir (pure Python): dtypes, expression construction, printing, structural hashing,
traversal, access-region analysis and the reference interpreter."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from looptune import te
from looptune.tir import (Binary, Block, BlockRealize, Buffer, BufferLoad, BufferRegion,
                          BufferStore, Cast, For, IntImm, IterVar, PrimFunc, Var,
                          binary, call, cast, collect_vars, const, dtype as dt, interpreter,
                          replace_buffers, select, seq, structural_equal, structural_hash,
                          substitute, transform, uses_var)
from looptune.tir.analysis import access_regions
from looptune.tir.stmt import TRUE


# ---------------------------------------------------------------------------- dtypes
def test_dtype_parse_and_properties():
    assert dt.parse("float32") == ("float32", 1)
    assert dt.parse("float32x8") == ("float32", 8)
    assert dt.parse("int8x16") == ("int8", 16)
    assert dt.lanes("float16x4") == 4 and dt.element("float16x4") == "float16"
    assert dt.with_lanes("float32x8", 1) == "float32"
    assert dt.with_lanes("int32", 4) == "int32x4"
    assert dt.is_float("float64") and not dt.is_float("int64")
    assert dt.is_int("uint8") and dt.is_int("int16") and not dt.is_int("bool")
    assert dt.is_bool("bool")
    assert dt.c_type("float32") == "float" and dt.c_type("int64") == "int64_t"
    assert dt.nbytes("float32x8") == 32 and dt.nbytes("bool") == 1 and dt.nbytes("float16") == 2
    assert dt.numpy_name("float16x2") == "float16"


def test_dtype_check_accepts_numpy_and_python_types():
    assert dt.check(np.float32) == "float32"
    assert dt.check(np.dtype("int64")) == "int64"
    assert dt.check(float) == "float32" and dt.check(int) == "int32"
    assert dt.check(np.dtype(bool)) == "bool"
    assert dt.check("uint8") == "uint8"


def test_dtype_errors():
    with pytest.raises(dt.DTypeError) as info:
        dt.parse("float33")
    msg = str(info.value)
    assert "float33" in msg
    for name in ("bool", "int8", "int32", "int64", "uint8", "float16", "float32", "float64"):
        assert name in msg  # the message lists what is supported
    for bad in ("float32x0", "float32x", "int32xx4"):
        with pytest.raises(dt.DTypeError, match="vector"):
            dt.parse(bad)
    with pytest.raises(dt.DTypeError, match="string"):
        dt.parse(32)
    with pytest.raises(TypeError):  # DTypeError is a TypeError
        dt.check("complex64")


def test_dtype_promotion():
    assert dt.promote("int32", "int32") == "int32"
    assert dt.promote("int32", "float32") == "float32"
    assert dt.promote("float16", "int64") == "float16"  # float beats int
    assert dt.promote("int32", "int64") == "int64"  # wider beats narrower
    assert dt.promote("float32", "float64") == "float64"
    assert dt.promote("bool", "int8") == "int8"
    assert dt.promote("uint8", "int16") == "int16"
    assert dt.promote("float32x4", "float32") == "float32x4"
    assert dt.promote("int32", "float32x8") == "float32x8"
    with pytest.raises(dt.DTypeError, match="lanes"):
        dt.promote("float32x4", "float32x8")


# ---------------------------------------------------------------------------- expressions
x, y, z, w = Var("x"), Var("y"), Var("z"), Var("w")


def test_constant_folding():
    assert (const(2) + const(3)).value == 5
    assert (const(7) * 6).value == 42
    assert (const(7) // -2).value == -4  # floor division
    assert (const(-7) // 2).value == -4
    assert (const(7) % -2).value == -1  # floor modulo takes the divisor's sign
    assert (const(-7) % 2).value == 1
    assert binary("tdiv", -7, const(2)).value == -3  # C's truncating forms
    assert binary("tmod", -7, const(2)).value == -1
    assert binary("tdiv", 7, const(-2)).value == -3
    assert (const(1.5) * 2).value == 3.0
    assert binary("min", const(4), 9).value == 4
    assert binary("max", const(4), 9).value == 9
    assert (const(3) < 4).value is True
    assert (const(3) == 4).dtype == "bool"
    assert (const(1) // 0).value == 0 and (const(1) % 0).value == 0  # numpy's, as at run time


def test_tdiv_folding_is_exact_for_large_int64():
    big = const(2 ** 62 + 1, "int64")
    assert binary("tdiv", big, const(3, "int64")).value == (2 ** 62 + 1) // 3
    assert binary("tmod", big, const(3, "int64")).value == (2 ** 62 + 1) % 3
    assert binary("tdiv", -big, const(3, "int64")).value == -((2 ** 62 + 1) // 3)


def test_trivial_identities():
    assert x + 0 is x and 0 + x is x and x - 0 is x
    assert x * 1 is x and 1 * x is x
    assert (x * 0).value == 0
    assert x // 1 is x
    assert (x % 1).value == 0
    f = Var("f", "float32")
    assert isinstance(f * 0.0, Binary)  # 0 * nan is nan: no identity for floats


def test_dtype_promotion_in_expressions():
    f = Var("f", "float32")
    e = x + f
    assert e.dtype == "float32"
    assert isinstance(e.a, Cast) and e.a.dtype == "float32" and e.a.value is x
    assert (Var("n", "int64") + x).dtype == "int64"
    assert (x < f).dtype == "bool"


def test_python_scalar_adopts_the_other_operand_dtype():
    h = Var("h", "float16")
    n = Var("n", "int64")
    assert (h + 1.5).dtype == "float16" and (1.5 + h).dtype == "float16"
    assert (h * 2).dtype == "float16"
    assert (n + 1).dtype == "int64" and (1 - n).dtype == "int64"
    e = x + 1.5  # a float next to an int expression makes the result float
    assert e.dtype == "float32" and isinstance(e.a, Cast)
    assert isinstance((n + 1).b, IntImm) and (n + 1).b.dtype == "int64"


def test_integer_true_division_is_an_error():
    with pytest.raises(TypeError, match="//"):
        x / 2
    with pytest.raises(TypeError, match="//"):
        2 / x
    f = Var("f", "float32")
    assert (f / 2).dtype == "float32"
    with pytest.raises(TypeError, match="integer"):
        f // 2
    with pytest.raises(TypeError, match="integer"):
        f % 2


def test_truth_values():
    with pytest.raises(TypeError, match="truth value"):
        bool(x < y)
    with pytest.raises(TypeError, match="truth value"):
        if x + 1:
            pass
    with pytest.raises(TypeError):
        bool(binary("and", x < 1, y < 1))
    # == and != build expressions whose truth value is identity, so vars work as dict keys
    assert bool(x == x) and not bool(x == y)
    assert bool(x != y) and not bool(x != x)
    assert (x == y).dtype == "bool" and isinstance(x == y, Binary)
    d = {x: 1, y: 2}
    assert d[x] == 1 and d[y] == 2 and x in {x, y} and z not in d
    assert (x == None) is False  # noqa: E711 - not an expression operand


def test_logic_ops():
    c = x < 3
    assert binary("and", c, True) is c
    assert binary("and", c, False).value is False
    assert binary("or", c, True).value is True
    assert binary("or", False, c) is c
    assert (c & (y > 1)).op == "and"
    with pytest.raises(TypeError, match="boolean"):
        binary("and", x, y)


def test_select_cast_call():
    assert select(const(True), x, y) is x
    assert select(const(False), x, y) is y
    s = select(x < 1, 1.0, Var("f", "float32"))
    assert s.dtype == "float32"
    with pytest.raises(TypeError, match="boolean"):
        select(x, 1, 2)
    assert cast(x, "int32") is x
    assert cast(const(2.9), "int32").value == 2 and cast(const(-2.9), "int32").value == -2
    assert cast(const(3), "float32").value == 3.0
    assert cast(const(300), "int8").value == 44  # integer casts wrap as in C
    assert cast(const(-1), "uint8").value == 255
    assert cast(const(-128), "int8").value == -128
    assert cast(const(5), "bool").value is True
    assert cast(Var("v", "float32x4"), "int32").dtype == "int32x4"  # keeps lanes
    assert call("exp", Var("f", "float32")).dtype == "float32"
    with pytest.raises(TypeError, match="astype"):
        call("exp", x)
    with pytest.raises(ValueError, match="unknown intrinsic"):
        call("expm1", Var("f", "float32"))


def test_const_and_float32_rounding():
    assert const(1).dtype == "int32" and const(2 ** 40).dtype == "int64"
    assert const(True).dtype == "bool" and const(0.5).dtype == "float32"
    assert const(0.1).value == float(np.float32(0.1))
    assert const(0.1, "float64").value == 0.1
    with pytest.raises(TypeError):
        const(1.5, "int32")


def test_buffer_indexing_and_validation():
    A = Buffer("A", (4, 6))
    load = A[x, 2]
    assert isinstance(load, BufferLoad) and load.indices[0] is x and load.indices[1].value == 2
    assert A.ndim == 2 and A.size == 24 and A.layout_strides() == (6, 1)
    assert Buffer("S", (4, 6), strides=(8, 1)).size == 30
    with pytest.raises(IndexError, match="2 dims"):
        A[x]
    with pytest.raises(ValueError, match="shape"):
        Buffer("B", (4, 0))
    with pytest.raises(ValueError, match="scope"):
        Buffer("B", (4,), scope="texture")
    with pytest.raises(dt.DTypeError):
        Buffer("B", (4,), "float128")


# ---------------------------------------------------------------------------- printer
def matmul_bias(m=4, n=5, k=6, prefix="", bias=1.0, dtype="float32"):
    A = te.placeholder((m, k), dtype, name=prefix + "A")
    B = te.placeholder((k, n), dtype, name=prefix + "B")
    r = te.reduce_axis(k, prefix + "k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    D = te.compute((m, n), lambda i, j: C[i, j] + bias, name="D")
    return te.create_prim_func([A, B, D])


def test_script_shows_blocks_loops_regions_and_init():
    text = matmul_bias().script()
    assert text.startswith("def D(A: float32[4, 6], B: float32[6, 5], D: float32[4, 5]):")
    for line in ("block root():",
                 "C = alloc([4, 5], 'float32', scope='global')",
                 "for i in range(4):",
                 "for k in range(6):",
                 "block C(vi=S(4, i), vj=S(5, j), vk=R(6, k)):",
                 "reads A[vi, vk], B[vk, vj]",
                 "writes C[vi, vj]",
                 "init:",
                 "C[vi, vj] = 0.0",
                 "C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]",
                 "D[vi_1, vj_1] = C[vi_1, vj_1] + 1.0"):
        assert line in text, f"{line!r} missing from\n{text}"
    lines = text.splitlines()
    # indentation follows loop depth
    assert any(ln.startswith(" " * 16 + "for k in range(6):") for ln in lines)


def test_expression_printing_parenthesises_by_precedence():
    assert repr((x + y) * 2) == "(x + y) * 2"
    assert repr(x - (y - z)) == "x - (y - z)"
    assert repr(x - y - z) == "x - y - z"
    assert repr(x * y // 4) == "x * y // 4"
    assert repr(x * (y // 4)) == "x * (y // 4)"
    assert repr(binary("min", x, y + 1)) == "min(x, y + 1)"
    assert repr((x < 1) & (y < 2)) == "x < 1 and y < 2"
    assert repr(const(3, "int64")) == "int64(3)"
    # Python chains comparisons, so a comparison of comparisons needs parentheses
    assert repr(binary("==", x < y, z < w)) == "(x < y) == (z < w)"
    assert repr(binary("!=", binary("==", x, y), z < w)) == "(x == y) != (z < w)"


def test_printer_keeps_distinct_vars_with_one_name_apart():
    a, b = Var("i"), Var("i")
    assert repr(a + b * 2) == "i + i_1 * 2"


# ---------------------------------------------------------------------------- structural
def elementwise(order=("i", "j"), shape=(4, 6), scale=2.0, dtype="float32", block="B",
                names=("A", "B")):
    """B[i, j] = A[i, j] * scale, with the loops nested in `order`."""
    A = Buffer(names[0], shape, dtype)
    B = Buffer(names[1], shape, dtype)
    loops = {"i": Var("i"), "j": Var("j")}
    vi, vj = IterVar(Var("vi"), shape[0]), IterVar(Var("vj"), shape[1])
    body = BufferStore(B, A[vi.var, vj.var] * scale, (vi.var, vj.var))
    reads, writes = access_regions(body)
    blk = Block(block, (vi, vj), reads, writes, body)
    stmt = BlockRealize((loops["i"], loops["j"]), TRUE, blk)
    extents = {"i": shape[0], "j": shape[1]}
    for name in reversed(order):
        stmt = For(loops[name], extents[name], "serial", stmt)
    root = Block("root", (), (), (), stmt)
    return PrimFunc("f", (A, B), BlockRealize((), TRUE, root))


def test_structural_hash_ignores_names():
    f1 = matmul_bias(prefix="")
    f2 = matmul_bias(prefix="other_")
    assert f1 is not f2
    assert structural_hash(f1) == structural_hash(f2) == f1.structural_hash()
    assert structural_equal(f1, f2)
    g1 = elementwise(names=("A", "B"))
    g2 = elementwise(names=("X", "Y"))
    assert structural_hash(g1) == structural_hash(g2) and structural_equal(g1, g2)
    assert len(structural_hash(g1)) == 16


@pytest.mark.parametrize("change", [
    dict(scale=3.0), dict(shape=(4, 8)), dict(dtype="float64"), dict(order=("j", "i")),
    dict(block="B2"),
])
def test_structural_hash_sees_real_changes(change):
    base = elementwise()
    other = elementwise(**change)
    assert structural_hash(base) != structural_hash(other)
    assert not structural_equal(base, other)


def test_structural_hash_sees_changes_in_te_workloads():
    base = structural_hash(matmul_bias())
    assert structural_hash(matmul_bias(bias=2.0)) != base
    assert structural_hash(matmul_bias(k=7)) != base
    assert structural_hash(matmul_bias(dtype="float64")) != base
    assert structural_hash(matmul_bias()) == base


def test_structural_equal_on_expressions_matches_hash():
    e1 = (x + 1) * y
    e2 = (z + 1) * w
    assert structural_equal(e1, e2) and structural_hash(e1) == structural_hash(e2)
    e3 = (x + 1) * x  # one variable used twice is a different shape from two variables
    assert not structural_equal(e1, e3) and structural_hash(e1) != structural_hash(e3)
    e4 = (x + 2) * y
    assert not structural_equal(e1, e4)
    assert not structural_equal(x + 1, Var("n", "int64") + 1)
    assert not structural_equal(const(1), const(1, "int64"))


_WORKLOAD = """
from looptune import te
from looptune.tir import structural_hash
A = te.placeholder((8, 16), name="A")
B = te.placeholder((16, 4), name="B")
k = te.reduce_axis(16, "k")
C = te.compute((8, 4), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
D = te.compute((8, 4), lambda i, j: te.max(C[i, j], 0.0), name="relu")
HASH = structural_hash(te.create_prim_func([A, B, D]))
"""


def test_structural_hash_is_stable_across_processes():
    ns: dict = {}
    exec(_WORKLOAD, ns)
    env = dict(os.environ, PYTHONHASHSEED="12345")  # Python's own hash() differs per process
    out = subprocess.run([sys.executable, "-c", _WORKLOAD + "print(HASH)"], env=env,
                         capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == ns["HASH"]


# ---------------------------------------------------------------------------- functor
def test_substitute_refolds_and_reaches_statements():
    e = (x + 1) * y
    assert substitute(e, {}) is e
    assert substitute(e, {z: const(1)}) is e  # nothing to replace: the same node comes back
    folded = substitute(e, {x: const(2), y: const(5)})
    assert isinstance(folded, IntImm) and folded.value == 15
    swapped = substitute(e, {x: y, y: x})  # simultaneous, not sequential
    assert swapped.a.a is y and swapped.b is x
    A = Buffer("A", (8,))
    st = BufferStore(A, A[x] + 1.0, (x,))
    st2 = substitute(st, {x: z * 2})
    assert st2.indices[0].a is z and st2.value.a.indices[0].a is z
    assert st.indices[0] is x  # the original is untouched


def test_uses_var_and_collect_vars():
    A = Buffer("A", (8,), "int32")
    e = A[x + 1] * y + select(z < 2, 1, 3)
    assert uses_var(e, {x}) and uses_var(e, {z}) and uses_var(e, [y])
    assert not uses_var(e, {w})
    assert collect_vars(e) == {x, y, z}
    # two nests: loops i, j, k and i, j; block vars vi, vj, vk and vi, vj (names repeat)
    names = sorted(v.name for v in collect_vars(matmul_bias().body))
    assert names == ["i", "i", "j", "j", "k", "vi", "vi", "vj", "vj", "vk"]


def test_transform_and_replace_buffers():
    A, A2 = Buffer("A", (8,)), Buffer("A2", (8,))
    B = Buffer("B", (8,))
    st = BufferStore(B, A[x] * 2.0, (x,))
    same = transform(st, lambda n: n)
    assert same is st
    new = replace_buffers(st, {A: A2})
    assert new.value.a.buffer is A2 and new.buffer is B
    doubled = transform(x + y, lambda n: n * 2 if isinstance(n, Var) else n)
    assert repr(doubled) == "x * 2 + y * 2"


def test_seq_flattens():
    A = Buffer("A", (2,))
    s1, s2, s3 = (BufferStore(A, const(float(v)), (const(0),)) for v in range(3))
    assert seq(s1) is s1
    assert seq(s1, None, seq(s2, s3)).stmts == (s1, s2, s3)


# ---------------------------------------------------------------------------- analysis
def _dims(region: BufferRegion):
    return [(repr(mn), ext) for mn, ext in region.region]


def test_access_regions_points_and_unions():
    i, j = Var("i"), Var("j")
    A = Buffer("A", (16,))
    M = Buffer("M", (8, 8))
    B = Buffer("B", (16,))
    body = BufferStore(B, A[i] + A[i + 2] + M[i, j] + M[j, i], (i,))
    reads, writes = access_regions(body)
    assert [r.buffer for r in reads] == [A, M]  # order of first access
    assert _dims(reads[0]) == [("i", 3)]  # A[i] and A[i + 2] -> [i, i + 3)
    assert _dims(reads[1]) == [("0", 8), ("0", 8)]  # j - i is not constant: whole dims
    assert len(writes) == 1 and writes[0].buffer is B and _dims(writes[0]) == [("i", 1)]


def test_access_regions_offsets_below_the_first_access():
    i = Var("i")
    A, B = Buffer("A", (16,)), Buffer("B", (16,))
    reads, _ = access_regions(BufferStore(B, A[i + 2] + A[i] + A[i + 1], (i,)))
    assert _dims(reads[0]) == [("i", 3)]
    reads, _ = access_regions(BufferStore(B, A[i * 2] + A[i * 2 + 1], (i,)))
    assert _dims(reads[0]) == [("i * 2", 2)]


def test_access_regions_reduction_self_update_is_a_write():
    i, k = Var("i"), Var("k")
    A, C = Buffer("A", (4, 8)), Buffer("C", (4,))
    body = BufferStore(C, C[i] + A[i, k], (i,))
    init = BufferStore(C, const(0.0), (i,))
    reads, writes = access_regions(body, init)
    assert [r.buffer for r in reads] == [A]
    assert [r.buffer for r in writes] == [C] and _dims(writes[0]) == [("i", 1)]


# ---------------------------------------------------------------------------- interpreter
def test_interpreter_matmul_bias_matches_numpy(rng):
    func = matmul_bias()
    a = rng.uniform(-1, 1, (4, 6)).astype("float32")
    b = rng.uniform(-1, 1, (6, 5)).astype("float32")
    d = np.full((4, 5), np.nan, "float32")
    interpreter.run(func, a, b, d)
    np.testing.assert_allclose(d, a @ b + 1.0, rtol=1e-5, atol=1e-5)


def test_interpreter_reduction_max_and_elementwise_chain(rng):
    A = te.placeholder((5, 7), name="A")
    r = te.reduce_axis(7, "r")
    M = te.compute((5,), lambda i: te.max(A[i, r], axis=r), name="M")
    E = te.compute((5, 7), lambda i, j: te.exp(A[i, j] - M[i]), name="E")
    func = te.create_prim_func([A, E])
    a = rng.uniform(-1, 1, (5, 7)).astype("float32")
    e = np.full((5, 7), np.nan, "float32")
    interpreter.run(func, a, e)
    np.testing.assert_allclose(e, np.exp(a - a.max(axis=1, keepdims=True)), rtol=1e-5)


def test_interpreter_integer_floor_semantics(rng):
    A = te.placeholder((12,), "int32", name="A")
    Q = te.compute((12,), lambda i: A[i] // 3 + A[i] % 5 * 100, name="Q")
    func = te.create_prim_func([A, Q])
    a = rng.integers(-50, 50, 12).astype("int32")
    q = np.zeros(12, "int32")
    interpreter.run(func, a, q)
    np.testing.assert_array_equal(q, a // 3 + a % 5 * 100)


def _copy_func(A, B, body_of):
    """B[...] = body_of(loops) in a hand-written loop nest (no block)."""
    root = Block("root", (), (), (), body_of())
    return PrimFunc("copy", (A, B), BlockRealize((), TRUE, root))


def test_interpreter_keeps_vars_whose_names_clash_after_mangling(rng):
    # "i.0" and "i_0" are different names in the IR but the same once made identifiers
    A, B = Buffer("A", (4,)), Buffer("B", (4,))
    i0, i1 = Var("i.0"), Var("i_0")
    func = _copy_func(A, B, lambda: For(i0, 2, "serial", For(i1, 2, "serial", BufferStore(
        B, A[i0 * 2 + i1] * 2.0, (i0 * 2 + i1,)))))
    func = PrimFunc("my-copy", func.params, func.body)  # not an identifier either
    a = rng.uniform(-1, 1, 4).astype("float32")
    b = np.full(4, np.nan, "float32")
    interpreter.run(func, a, b)
    np.testing.assert_allclose(b, a * 2)


def test_interpreter_block_predicate_and_select(rng):
    A, B = Buffer("A", (10,)), Buffer("B", (10,))
    o, n = Var("o"), Var("n")
    v = IterVar(Var("v"), 10)
    body = BufferStore(B, select(A[v.var] > 0.0, A[v.var], A[v.var] * 0.5), (v.var,))
    reads, writes = access_regions(body)
    blk = Block("B", (v,), reads, writes, body)
    realize = BlockRealize((o * 4 + n,), o * 4 + n < 10, blk)  # split 10 by 4: 12 iterations
    func = _copy_func(A, B, lambda: For(o, 3, "serial", For(n, 4, "serial", realize)))
    a = rng.uniform(-1, 1, 10).astype("float32")
    b = np.full(10, np.nan, "float32")
    interpreter.run(func, a, b)  # without the predicate A[10] would be read
    np.testing.assert_allclose(b, np.where(a > 0, a, a * 0.5), rtol=1e-6)


def test_interpreter_and_printer_accept_an_empty_loop_body(rng):
    # lowering can prune a loop body down to seq() of nothing
    A, B = Buffer("A", (3,)), Buffer("B", (3,))
    i, j = Var("i"), Var("j")
    body = seq(For(j, 2, "serial", seq()), For(i, 3, "serial", BufferStore(B, A[i] - 1.0, (i,))))
    func = _copy_func(A, B, lambda: body)
    assert "for j in range(2):\n            pass\n" in func.script()
    a = rng.uniform(-1, 1, 3).astype("float32")
    b = np.full(3, np.nan, "float32")
    interpreter.run(func, a, b)
    np.testing.assert_allclose(b, a - 1.0)


def test_interpreter_writes_back_into_non_contiguous_outputs(rng):
    func = matmul_bias(m=4, n=6, k=3)
    a = rng.uniform(-1, 1, (4, 3)).astype("float32")
    b = rng.uniform(-1, 1, (3, 6)).astype("float32")
    d = np.full((3, 8), np.nan, "float32").T  # 24 elements, but not viewable as (4, 6)
    interpreter.run(func, a, b, d)
    np.testing.assert_allclose(d.reshape(4, 6), a @ b + 1.0, rtol=1e-5, atol=1e-5)
    # a read-only input that has to be copied is fine too
    b_ro = np.asfortranarray(b.reshape(2, 9))
    b_ro.flags.writeable = False
    d[...] = np.nan
    interpreter.run(func, a, b_ro, d)
    np.testing.assert_allclose(d.reshape(4, 6), a @ b + 1.0, rtol=1e-5, atol=1e-5)


def test_interpreter_strided_parameter(rng):
    # B has row stride 8 for 4x6 elements: 30 elements of storage, the gaps untouched
    A = Buffer("A", (4, 6))
    B = Buffer("B", (4, 6), strides=(8, 1))
    i, j = Var("i"), Var("j")
    func = _copy_func(A, B, lambda: For(i, 4, "serial", For(j, 6, "serial", BufferStore(
        B, A[i, j] + 1.0, (i, j)))))
    a = rng.uniform(-1, 1, (4, 6)).astype("float32")
    storage = np.full(B.size, -7.0, "float32")
    interpreter.run(func, a, storage)
    full = np.concatenate([storage, np.zeros(2, "float32")]).reshape(4, 8)
    np.testing.assert_allclose(full[:, :6], a + 1.0)
    assert (full[:3, 6:] == -7.0).all()


def test_interpreter_argument_errors():
    func = matmul_bias()
    with pytest.raises(ValueError, match="takes 3 arrays"):
        interpreter.run(func, np.ones((4, 6)))
    with pytest.raises(ValueError, match="argument B"):
        interpreter.run(func, np.ones((4, 6)), np.ones((5, 5)), np.ones((4, 5)))


def test_interpreter_source_is_readable():
    src, fn = interpreter.compile_python(matmul_bias())
    assert src.startswith("def D_ref(A_, B_, D_):")
    assert "if vk_ == 0:" in src and callable(fn)
