"""Lowering passes checked directly (pure Python, through the interpreter): reduction-init
placement, buffer compaction, loop partitioning."""
from __future__ import annotations

import numpy as np

from looptune import te
from looptune.codegen import lower
from looptune.codegen.passes import compact_buffers, lower_blocks, partition_loops
from looptune.schedule import Schedule
from looptune.tir import interpreter, structural_equal
from looptune.tir.buffer import Buffer
from looptune.tir.expr import Var, binary, select
from looptune.tir.func import PrimFunc
from looptune.tir.stmt import Allocate, BufferStore, For, IfThenElse, seq

RNG = np.random.default_rng(3)


def matmul(M=12, N=10, K=7):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def alloc_in(stmt):
    """The Allocate a loop body starts with (after any comments)."""
    for x in getattr(stmt, "stmts", (stmt,)):
        if isinstance(x, Allocate):
            return x
    return None


def run(func, *args):
    out = np.full(args[-1], np.nan, "float32")
    interpreter.run(func, *args[:-1], out)
    return out


def loops_of(stmt) -> list:
    out = []

    def walk(s):
        if isinstance(s, For):
            out.append(s)
            walk(s.body)
        for x in getattr(s, "stmts", ()):
            walk(x)
        for a in ("then_case", "else_case", "body"):
            x = getattr(s, a, None)
            if x is not None and not isinstance(s, For):
                walk(x)
    walk(stmt)
    return out


def test_init_is_hoisted_before_the_outermost_reduction_loop():
    sch = Schedule(matmul())
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(i, k, j)
    low = lower_blocks(sch.func)
    text = low.script()
    assert "j_init" in text and "== 0" not in text  # no per-iteration condition
    a, b = RNG.uniform(-1, 1, (12, 7)).astype("float32"), RNG.uniform(-1, 1, (7, 10)).astype("float32")
    np.testing.assert_allclose(run(lower(sch.func, vectorize=False), a, b, (12, 10)), a @ b,
                               rtol=1e-5, atol=1e-6)


def test_init_falls_back_to_a_condition_when_a_loop_mixes_kinds():
    sch = Schedule(matmul())
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(i, k, j)
    sch.fuse(k, j)  # one loop drives both k (reduction) and j (spatial)
    text = lower_blocks(sch.func).script()
    assert "== 0" in text
    a, b = RNG.uniform(-1, 1, (12, 7)).astype("float32"), RNG.uniform(-1, 1, (7, 10)).astype("float32")
    np.testing.assert_allclose(run(lower(sch.func, vectorize=False), a, b, (12, 10)), a @ b,
                               rtol=1e-5, atol=1e-6)


def test_compaction_shrinks_a_tile_buffer_into_its_loop():
    sch = Schedule(matmul(16, 16, 8))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 8])
    sch.reorder(i0, j0, k, i1, j1)
    acc = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(acc, j0)
    low = compact_buffers(lower_blocks(sch.func))
    assert not isinstance(low.body, Allocate)  # no longer allocated at function level
    j0_loop = loops_of(low.body)[1]
    alloc = alloc_in(j0_loop.body)
    assert alloc is not None and alloc.buffer.shape == (4, 8)


def test_compaction_bounds_a_guarded_copy_by_its_tile_not_its_loop():
    """A copy of a 6 x 6 tile of A fused and split by 16 runs 3 x 16 = 48 iterations guarded
    by `fused < 36`: its buffer is the 6 x 6 tile, not the 8 rows the loop alone would reach
    (47 // 6 + 1); and the result is right."""
    sch = Schedule(matmul(12, 10, 6))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 6])
    cache = sch.cache_read(c, 0, "local")
    sch.compute_at(cache, i0)
    _, inner = sch.split(sch.fuse(*sch.get_loops(cache)[-2:]), [None, 16])
    low = compact_buffers(lower_blocks(sch.func))
    (alloc,) = [a for a in _allocs(low.body) if a.buffer.name.startswith("A")]
    assert alloc.buffer.shape == (6, 6)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (12, 6)).astype("float32")
    b = rng.uniform(-1, 1, (6, 10)).astype("float32")
    np.testing.assert_allclose(run(sch.func, a, b, (12, 10)), a @ b, rtol=1e-5)


def _allocs(s):
    from looptune.tir.functor import find_stmts
    return find_stmts(s, Allocate)


def test_compaction_keeps_an_accumulator_outside_its_accumulation_loop():
    """acc[i] accumulates over k, and every access sits inside loop k: reallocating it per
    iteration of k would lose the sum, so it must live in loop i."""
    X = Buffer("X", (3, 5))
    Y = Buffer("Y", (3,))
    acc = Buffer("acc", (3,))
    i, k = Var("i"), Var("k")
    update = BufferStore(acc, binary("+", select(binary("==", k, 0), 0.0, acc[i]), X[i, k]), (i,))
    write = IfThenElse(binary("==", k, 4), BufferStore(Y, acc[i], (i,)))
    body = Allocate(acc, For(i, 3, "serial", For(k, 5, "serial", seq(update, write))))
    func = PrimFunc("f", (X, Y), body)
    out = compact_buffers(func)
    i_loop = out.body
    assert isinstance(i_loop, For) and alloc_in(i_loop.body) is not None
    assert alloc_in(i_loop.body).buffer.shape == (1,)
    x = RNG.uniform(-1, 1, (3, 5)).astype("float32")
    y = np.full(3, np.nan, "float32")
    interpreter.run(out, x, y)
    np.testing.assert_allclose(y, x.sum(axis=1), rtol=1e-5)


def test_partitioning_removes_guards_from_the_main_part():
    sch = Schedule(matmul(30, 10, 7))
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 8])  # 4 x 8 covers 30: guarded
    sch.reorder(i0, j, k, i1)
    low = lower_blocks(sch.func)
    parts = partition_loops(low.body)
    main = loops_of(parts)
    assert main[0].extent == 3  # i0 in 0..3 needs no guard
    main_text = repr(main[0])
    assert "< 30" not in main_text and "if" not in main_text.split("for i_0_tail")[0]
    a, b = RNG.uniform(-1, 1, (30, 7)).astype("float32"), RNG.uniform(-1, 1, (7, 10)).astype("float32")
    np.testing.assert_allclose(run(lower(sch.func, vectorize=False), a, b, (30, 10)), a @ b,
                               rtol=1e-5, atol=1e-6)


def test_partitioning_leaves_dividing_loops_alone():
    sch = Schedule(matmul(32, 10, 7))
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 8])
    low = lower_blocks(sch.func)
    assert structural_equal(partition_loops(low.body), low.body)  # nothing to cut


def test_unroll_budget_counts_vectors_of_the_given_width():
    """A 16-float vectorized loop is one AVX-512 statement but two AVX2 ones: under a max step
    of 32, the 32-iteration loop around it unrolls at 512 bits and not at 256."""
    from looptune.codegen import lower_loops
    from looptune.tir.functor import visit

    A = te.placeholder((2, 32, 16), name="A")
    B = te.compute((2, 32, 16), lambda n, i, j: A[n, i, j] * 2.0, name="B")
    sch = Schedule(te.create_prim_func([A, B]))
    blk = sch.get_block("B")
    sch.vectorize(sch.get_loops(blk)[2])  # the pragma applies inside the outermost loop
    sch.annotate(blk, "pragma_auto_unroll_max_step", 32)

    def kinds(bits):
        out = {}
        visit(lower_loops(sch.func, vector_bits=bits).body,
              lambda n: out.setdefault(n.loop_var.name, n.kind) if isinstance(n, For) else None)
        return out

    assert kinds(512) == {"n": "serial", "i": "unrolled", "j": "vectorized"}
    assert kinds(256) == {"n": "serial", "i": "serial", "j": "vectorized"}


def _loop_kinds(stmt) -> dict:
    from looptune.tir.functor import visit
    out = {}
    visit(stmt, lambda n: out.setdefault(n.loop_var.name, n.kind) if isinstance(n, For) else None)
    return out


def test_explicit_unrolling_copies_in_the_ir_only_what_simplifies_per_copy():
    """A loop whose body tests its variable (padding) is copied before flattening, so each copy
    keeps only the guards it needs; a plain one stays a loop for the renderer to print."""
    from looptune.codegen import finish_lowering, lower_loops

    def padded():
        A = te.placeholder((8, 16), name="A")
        B = te.compute((10, 16), lambda i, j: te.if_then_else(
            te.all(i >= 1, i < 9), A[te.max(i - 1, 0), j], 0.0), name="B")
        sch = Schedule(te.create_prim_func([A, B]))
        blk = sch.get_block("B")
        i, j = sch.get_loops(blk)
        io, ii = sch.split(i, [None, 5])
        sch.annotate(blk, "pragma_auto_unroll_max_step", 512)
        sch.annotate(blk, "pragma_unroll_explicit", 1)
        return sch

    sch = padded()
    low = finish_lowering(lower_loops(sch.func), vectorize=False)
    assert "i_1" not in _loop_kinds(low.body)  # copied: it appears in the guard
    a = RNG.uniform(-1, 1, (8, 16)).astype("float32")
    want = np.concatenate([np.zeros((1, 16)), a, np.zeros((1, 16))]).astype("float32")
    np.testing.assert_array_equal(run(low, a, (10, 16)), want)
    plain = Schedule(matmul(8, 16, 4))
    c = plain.get_block("C")
    plain.annotate(c, "pragma_auto_unroll_max_step", 512)
    plain.annotate(c, "pragma_unroll_explicit", 1)
    kinds = _loop_kinds(finish_lowering(lower_loops(plain.func), vectorize=False).body)
    assert "unrolled" in kinds.values()  # left for the renderer to copy


def test_big_tails_of_partitioned_loops_stay_rolled(monkeypatch):
    from looptune.codegen.passes import partition

    sch = Schedule(matmul(30, 10, 7))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 8])
    sch.reorder(i0, j, k, i1)
    sch.annotate(c, "pragma_auto_unroll_max_step", 64)
    sch.annotate(c, "pragma_unroll_explicit", 1)
    from looptune.codegen import lower_loops
    body = lower_loops(sch.func).body
    small = repr(partition_loops(body)).split("i_0_tail", 1)[1]
    assert "unrolled" in small  # a small tail keeps its unrolling
    monkeypatch.setattr(partition, "TAIL_UNROLL_BUDGET", 4)
    parts = partition_loops(body)
    assert _loop_kinds(loops_of(parts)[0])["i_1"] == "unrolled"
    assert "unrolled" not in repr(parts).split("i_0_tail", 1)[1]


def test_copied_loop_terms_go_last_in_an_index():
    """`a*56 + u*14 + b + 3` -> `a*56 + b + u*14 + 3` for a loop u the renderer copies, so each
    copy's constant ends up at the end of the address."""
    from looptune.codegen.passes.unroll import EXPLICIT, copied_terms_last
    from looptune.tir.expr import const
    from looptune.tir.stmt import with_annotation

    a, u, b = Var("a", "int32"), Var("u", "int32"), Var("b", "int32")
    buf = Buffer("X", (1024,), "float32")
    idx = binary("+", binary("+", binary("+", binary("*", a, 56), binary("*", u, 14)), b), 3)
    store = BufferStore(buf, const(1.0, "float32"), (idx,))
    copied = For(u, 4, "unrolled", store, None, with_annotation((), EXPLICIT, 1))
    out = copied_terms_last(For(a, 8, "serial", For(b, 8, "serial", copied, None, ()), None, ()))
    want = binary("+", binary("+", binary("+", binary("*", a, 56), b), binary("*", u, 14)), 3)
    assert repr(out.body.body.body.indices[0]) == repr(want)
    plain = For(u, 4, "unrolled", store, None, ())  # not copied by the renderer: untouched
    assert copied_terms_last(plain) is plain


def small_conv(C=2, H=5, W=6, K=3):
    from looptune.te import ops
    X = te.placeholder((1, C, H, W), name="X")
    Wt = te.placeholder((K, C, 3, 3), name="W")
    return te.create_prim_func([X, Wt, ops.conv2d_nchw(X, Wt, stride=1, padding=1)])


def test_padding_loops_are_cut_where_their_selection_switches():
    from looptune.codegen.passes import partition_selects
    from looptune.te.ops import reference
    sch = Schedule(small_conv())
    pad = sch.get_block("pad")
    sch.compute_at(pad, sch.get_loops(sch.get_block("conv2d_nchw"))[2])  # a row of pads per y
    cut = partition_selects(lower_blocks(sch.func).body)
    inner = [lp for lp in loops_of(cut) if "_p" in lp.loop_var.name]
    assert [lp.extent for lp in inner] == [1, 6, 1]  # 8 padded columns: 0 | 1..6 | 7
    lowered = lower(sch.func, vectorize=False)
    parts = [lp for lp in loops_of(lowered.body) if "_p" in lp.loop_var.name]
    assert [lp.loop_var.name for lp in parts] == ["ax2_p1"]  # columns 0 and 7: one store each
    assert "_p1 + 1 >= 1" not in repr(parts[0]) and "X[" in repr(parts[0])  # a plain copy
    x = RNG.uniform(-1, 1, (1, 2, 5, 6)).astype("float32")
    w = RNG.uniform(-1, 1, (3, 2, 3, 3)).astype("float32")
    want = reference.conv2d_nchw(x, w, padding=1)
    np.testing.assert_allclose(run(lower(sch.func, vectorize=False), x, w, (1, 3, 5, 6)), want,
                               rtol=1e-5, atol=1e-5)


def test_selection_cuts_skip_switch_points_that_depend_on_outer_loops():
    from looptune.codegen.passes import partition_selects
    sch = Schedule(small_conv())
    sch.compute_inline(sch.get_block("pad"))  # the column test now reads x + rs
    low = lower_blocks(sch.func)
    assert "_p0" not in repr(partition_selects(low.body))


def test_explicit_copies_are_capped_outermost_first():
    """A kernel whose explicit unrolling would print more statements than
    MAX_COPIED_STATEMENTS keeps its outermost copied loops as loops until it fits (GCC took
    seconds per candidate on such conv2d sources); it still computes the same values."""
    from looptune.codegen import finish_lowering, lower_loops
    from looptune.codegen.passes.unroll import copied_statements

    sch = Schedule(matmul(16, 32, 24))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    sch.reorder(k, i, j)
    sch.annotate(c, "pragma_auto_unroll_max_step", 1 << 20)
    sch.annotate(c, "pragma_unroll_explicit", 1)
    loops = lower_loops(sch.func)
    assert copied_statements(loops.body, 1) > 512  # 24 x 16 x 32 stores, init aside
    low = finish_lowering(loops, vectorize=False)
    kinds = _loop_kinds(low.body)
    assert kinds["k"] == "serial" and kinds["i"] == "serial"  # the outer ones stay loops
    assert copied_statements(low.body, 1) <= 512
    a = RNG.uniform(-1, 1, (16, 24)).astype("float32")
    b = RNG.uniform(-1, 1, (24, 32)).astype("float32")
    np.testing.assert_allclose(run(low, a, b, (16, 32)), a @ b, rtol=1e-5, atol=1e-5)


def test_loops_of_one_iteration_leave_the_lowered_code():
    """Splits of factor 1 leave no loop and no variable in the code the renderer prints."""
    from looptune.codegen import finish_lowering, lower_loops
    from looptune.tir.functor import visit

    sch = Schedule(matmul(12, 10, 7))
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 1, 4])
    sch.split(j, [1, None])
    low = finish_lowering(lower_loops(sch.func), vectorize=False)
    extents = []
    visit(low.body, lambda n: extents.append(n.extent) if isinstance(n, For) else None)
    assert 1 not in extents and "i_1" not in repr(low.body) and "j_0" not in repr(low.body)
    a = RNG.uniform(-1, 1, (12, 7)).astype("float32")
    b = RNG.uniform(-1, 1, (7, 10)).astype("float32")
    np.testing.assert_allclose(run(low, a, b, (12, 10)), a @ b, rtol=1e-5, atol=1e-5)


def test_a_one_iteration_tail_keeps_the_loop_its_variable_runs_elsewhere():
    """Partitioning copies a nest: the tail of a non-dividing split can run a loop once whose
    variable runs 8 times in the main part; dropping the tail's loop leaves the other."""
    from looptune.codegen import finish_lowering, lower_loops

    sch = Schedule(matmul(17, 16, 5))
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 8])
    sch.split(j, [None, 16])
    low = finish_lowering(lower_loops(sch.func), vectorize=False)
    a = RNG.uniform(-1, 1, (17, 5)).astype("float32")
    b = RNG.uniform(-1, 1, (5, 16)).astype("float32")
    np.testing.assert_allclose(run(low, a, b, (17, 16)), a @ b, rtol=1e-5, atol=1e-5)
