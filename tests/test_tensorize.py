"""Tensor intrinsics and tensorize: the description check (pure Python), each x86 unit's C
against numpy on full-range int8 inputs (C compiler), the Target's offer and refusal, the
instructions in the object code, and the search around the units (tune_tir end to end)."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import looptune as lt
from looptune import te
from looptune.backend import Backend
from looptune.error import BuildError
from looptune.schedule import Schedule, ScheduleError, Trace
from looptune.target import Target, host
from looptune.target.target import detected, narrowed
from looptune.tir.intrin import TENSORIZE, get_intrin, intrin_names
from looptune.tune import TuneContext
from looptune.tune.schedule_rule import MultiLevelTilingWithIntrin

X86 = detected().arch == "x86_64"
INT8 = ["x86_dot_u8s8_16x4", "x86_dot_u8s8_8x4_avxvnni", "x86_dot_u8s8_8x4_avx2"]
RNG = np.random.default_rng(11)


def dense_u8s8(M=12, N=48, K=32, *, a_dtype="uint8", w_dtype="int8"):
    A = te.placeholder((M, K), a_dtype, name="A")
    W = te.placeholder((N, K), w_dtype, name="W")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("int32") * W[j, k].astype("int32"),
                                               axis=k), name="C")
    return te.create_prim_func([A, W, C])


def dense_f32(M=12, N=48, K=32):
    A = te.placeholder((M, K), name="A")
    W = te.placeholder((N, K), name="W")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * W[j, k], axis=k), name="C")
    return te.create_prim_func([A, W, C])


def tiled(func, intrin, *, rows=4, pack=True, accumulate_locally=True):
    """The register-tile schedule: W packed by the unit's group, j split by its lanes and k
    by its group, the two innermost, i in row tiles, the accumulators in a local tile."""
    lanes, group = get_intrin(intrin).extents
    sch = Schedule(func)
    b = sch.get_block("C")
    if pack:
        sch.pack_layout(b, 1, group)
    i, j, k = sch.get_loops(b)
    i0, i1 = sch.split(i, [None, rows])
    j0, j1 = sch.split(j, [None, lanes])
    k0, k1 = sch.split(k, [None, group])
    sch.reorder(i0, j0, k0, i1, j1, k1)
    if accumulate_locally:
        sch.reverse_compute_at(sch.cache_write(b, 0, "local"), j0)
    return sch, j1


def offered(name) -> bool:
    return get_intrin(name).offered_by(host())


def full_range(M, N, K):
    """u8 and s8 over their whole ranges, with the extremes' products in every row: where
    two 255 x -128 products would saturate vpmaddubsw's int16 (AVX2's usual path)."""
    a = RNG.integers(0, 256, (M, K)).astype("uint8")
    w = RNG.integers(-128, 128, (N, K)).astype("int8")
    a[0, :], w[0, :] = 255, -128
    a[1, :], w[1, :] = 255, 127
    return a, w


# ------------------------------------------------------------------ pure Python
def test_every_intrinsic_has_a_description_a_unit_and_c():
    assert set(INT8) <= set(intrin_names()) and "x86_dot_bf16_16x2" in intrin_names()
    vnni = get_intrin("x86_dot_u8s8_16x4")
    assert vnni.extents == (16, 4) and vnni.requires == ("avx512_vnni", "avx512f")
    text = vnni.script()
    assert "C[j] = C[j] + int32(A[k]) * int32(B[j, k])" in text
    assert "_mm512_dpbusd_epi32" in vnni.impl
    with pytest.raises(KeyError, match="unknown tensor intrinsic 'amx_magic'"):
        get_intrin("amx_magic")


def test_a_target_offers_the_intrinsics_of_its_units_only():
    assert Target.create("llvm -mcpu=znver3").tensor_intrins() == ["x86_dot_u8s8_8x4_avx2"]
    zen4 = Target.create("llvm -mcpu=znver4").tensor_intrins()
    assert "x86_dot_u8s8_16x4" in zen4 and "x86_dot_bf16_16x2" in zen4
    assert "x86_dot_u8s8_8x4_avxvnni" not in zen4  # Zen 4 has AVX512-VNNI, not AVX-VNNI
    spr = narrowed(Target.create("llvm -mcpu=sapphirerapids"), "avx2")
    assert spr.tensor_intrins() == ["x86_dot_u8s8_8x4_avx2"]  # as an AVX2 machine: no VNNI
    assert Target.create("cuda -arch=sm_80").tensor_intrins() == []


def test_tensorize_checks_the_nest_against_the_description():
    sch, j1 = tiled(dense_u8s8(), "x86_dot_u8s8_16x4")
    sch.tensorize(j1, "x86_dot_u8s8_16x4")
    loop = sch.get(j1)
    assert loop.annotation(TENSORIZE) == "x86_dot_u8s8_16x4"
    with pytest.raises(ScheduleError, match="tensorized already"):
        sch.tensorize(j1, "x86_dot_u8s8_16x4")
    # W in its own layout: each lane's group is a row of W apart
    sch, j1 = tiled(dense_u8s8(), "x86_dot_u8s8_16x4", pack=False)
    with pytest.raises(ScheduleError, match=r"W moves by 32 elements per step of loop j_1.*"
                                            r"needs 4.*pack_layout"):
        sch.tensorize(j1, "x86_dot_u8s8_16x4")
    # lanes of 8 against a unit of 16
    sch, j1 = tiled(dense_u8s8(), "x86_dot_u8s8_8x4_avx2")
    with pytest.raises(ScheduleError, match=r"extents \(8, 4\).*\(16, 4\)"):
        sch.tensorize(j1, "x86_dot_u8s8_16x4")
    # a float32 dense is not an int8 dot product; s8 activations are not VNNI's u8
    sch, j1 = tiled(dense_f32(), "x86_dot_u8s8_16x4")
    with pytest.raises(ScheduleError, match="C_local is float32.*operand C is int32"):
        sch.tensorize(j1, "x86_dot_u8s8_16x4")
    sch, j1 = tiled(dense_u8s8(a_dtype="int8"), "x86_dot_u8s8_16x4")
    with pytest.raises(ScheduleError, match="A: int8.*A: uint8"):
        sch.tensorize(j1, "x86_dot_u8s8_16x4")
    with pytest.raises(ScheduleError, match="unknown tensor intrinsic"):
        sch.tensorize(j1, "x86_no_such_unit")


def test_an_init_that_would_run_inside_the_nest_is_refused():
    """With every reduction loop inside the nest, lowering would put C's init there: the
    unit would start from zero at every step."""
    sch = Schedule(dense_u8s8(K=4))
    b = sch.get_block("C")
    sch.pack_layout(b, 1, 4)
    i, j, k = sch.get_loops(b)
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i, j0, j1, k)
    with pytest.raises(ScheduleError, match="init would run inside the nest.*decompose_reduction"):
        sch.tensorize(j1, "x86_dot_u8s8_16x4")


def test_a_tensorize_step_prints_serializes_and_replays():
    sch, j1 = tiled(dense_u8s8(), "x86_dot_u8s8_8x4_avx2")
    sch.tensorize(j1, "x86_dot_u8s8_8x4_avx2")
    assert "sch.tensorize(loop=l" in sch.trace.as_python()
    assert "intrin='x86_dot_u8s8_8x4_avx2'" in sch.trace.as_python()
    again = Schedule(dense_u8s8())
    Trace.from_json(sch.trace.to_json()).apply_to_schedule(again)
    assert lt.tir.structural_equal(again.func, sch.func)
    marked = [lp for lp in again.enclosing_loops(again.get_block("C"))
              if lp.annotation(TENSORIZE)]
    assert [lp.annotation(TENSORIZE) for lp in marked] == ["x86_dot_u8s8_8x4_avx2"]


def _rule_spaces(func, target):
    rule = MultiLevelTilingWithIntrin()
    rule.initialize_with_tune_context(TuneContext(func, target=target))
    sch = Schedule(func, seed=0)
    return rule.apply(sch, sch.get_block("C"))


def test_the_rule_tiles_around_the_targets_best_unit_and_keeps_the_plain_block():
    spaces = _rule_spaces(dense_u8s8(M=16, N=64, K=64), Target.create("llvm -mcpu=znver4"))
    texts = [s.trace.as_python() for s in spaces]
    assert len(spaces) == 3  # two write levels around the unit, and the block as it was
    assert all("intrin='x86_dot_u8s8_16x4'" in t and "pack_layout" in t for t in texts[:2])
    assert "tensorize" not in texts[2]
    zen3 = _rule_spaces(dense_u8s8(M=16, N=64, K=64), Target.create("llvm -mcpu=znver3"))
    assert "intrin='x86_dot_u8s8_8x4_avx2'" in zen3[0].trace.as_python()
    plain = _rule_spaces(dense_f32(M=16, N=64, K=64), Target.create("llvm -mcpu=znver4"))
    assert len(plain) == 1 and "tensorize" not in plain[0].trace.as_python()


# ------------------------------------------------------------------ with a C compiler
@pytest.mark.cc
@pytest.mark.parametrize("name", INT8)
def test_each_int8_unit_computes_the_dot_products_exactly(name):
    if not offered(name):
        pytest.skip(f"this CPU lacks {', '.join(get_intrin(name).requires)}")
    M, N, K = 14, 48, 32  # 14 rows: the last row tile is partitioned (a guard outside the nest)
    sch, j1 = tiled(dense_u8s8(M, N, K), name)
    sch.tensorize(j1, name)
    mod = lt.build(sch, num_threads=1)
    assert f"lt_intrin_{name}(&" in mod.source
    a, w = full_range(M, N, K)
    c = np.full((M, N), -7, "int32")
    mod(*mod.pack(a, w, c))
    np.testing.assert_array_equal(c, a.astype(np.int64) @ w.astype(np.int64).T)


@pytest.mark.cc
def test_the_interpreter_and_verification_see_the_loops():
    """The nest stays in the IR: the scalar lowering the interpreter runs has no call."""
    sch, j1 = tiled(dense_u8s8(), "x86_dot_u8s8_8x4_avx2")
    sch.tensorize(j1, "x86_dot_u8s8_8x4_avx2")
    scalar = Backend.for_target("cpu").lower(sch.func, vectorize=False)
    assert "lt_intrin" not in scalar.script()
    compiled = Backend.for_target("cpu").lower(sch.func)
    assert "lt_intrin_x86_dot_u8s8_8x4_avx2" in compiled.script()


@pytest.mark.cc
def test_a_schedule_that_breaks_the_nest_after_tensorize_fails_to_build():
    sch, j1 = tiled(dense_u8s8(), "x86_dot_u8s8_8x4_avx2")
    sch.tensorize(j1, "x86_dot_u8s8_8x4_avx2")
    sch.split(j1, [None, 4])  # the nest is now 2 x 4 x 4
    with pytest.raises(BuildError, match="tensorized with x86_dot_u8s8_8x4_avx2 but no longer "
                                         "matches"):
        lt.build(sch)


@pytest.mark.cc
@pytest.mark.skipif(not X86, reason="x86 units")
def test_a_target_without_the_unit_gets_no_code_that_uses_it():
    if not (detected().has("avx2") and detected().has("fma")):
        pytest.skip("needs an AVX2 machine")
    avx2 = narrowed(detected(), "avx2")
    sch, j1 = tiled(dense_u8s8(), "x86_dot_u8s8_16x4")
    sch.tensorize(j1, "x86_dot_u8s8_16x4")
    with pytest.raises(BuildError, match=r"needs avx512_vnni.*lacks it.*x86_dot_u8s8_8x4_avx2"):
        Backend.for_target(avx2).build(sch)
    sch, j1 = tiled(dense_u8s8(), "x86_dot_u8s8_8x4_avx2")
    sch.tensorize(j1, "x86_dot_u8s8_8x4_avx2")
    mod = Backend.for_target(avx2).build(sch, num_threads=1)
    a, w = full_range(12, 48, 32)
    c = np.zeros((12, 48), "int32")
    mod(*mod.pack(a, w, c))
    np.testing.assert_array_equal(c, a.astype(np.int64) @ w.astype(np.int64).T)
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("no objdump to read the object code")
    asm = subprocess.run([objdump, "-d", str(mod.lib_path)], capture_output=True,
                         text=True).stdout
    assert "vpmaddwd" in asm and "vpdpbusd" not in asm and "%zmm" not in asm
    if offered("x86_dot_u8s8_16x4"):
        sch, j1 = tiled(dense_u8s8(), "x86_dot_u8s8_16x4")
        sch.tensorize(j1, "x86_dot_u8s8_16x4")
        vnni = lt.build(sch, num_threads=1)
        asm = subprocess.run([objdump, "-d", str(vnni.lib_path)], capture_output=True,
                             text=True).stdout
        assert "vpdpbusd" in asm and "%zmm" in asm


@pytest.mark.cc
def test_tuning_an_int8_dense_measures_the_unit_and_compiles_the_best_verified(tmp_path):
    """tune_tir with the default rules: the search measures tensorized candidates (the
    target's best int8 unit), compile_tir applies the best verified record, and the module
    says which argument it takes packed."""
    func = dense_u8s8(M=32, N=64, K=64)
    target = Target.create("cpu")
    best = {next((n for n in family if n in target.tensor_intrins()), None)
            for family in (["x86_amx_u8s8_32x32"], INT8)} - {None}
    if not best:
        pytest.skip("no int8 unit here")
    db = lt.tune.tune_tir(func, target, tmp_path, max_trials_global=8, num_trials_per_iter=8,
                          seed=0)
    records = db.records_of(db.commit_workload(func), target)
    units = {inst.attrs[0] for r in records for inst in r.trace.insts
             if inst.kind.name == "Tensorize"}
    assert units and units <= best  # each family's best unit, and no unit the CPU lacks
    assert any(r.ok for r in records if any(i.kind.name == "Tensorize" for i in r.trace.insts))
    mod = lt.tune.compile_tir(db, func, target, num_threads=1)
    a, w = full_range(32, 64, 64)
    c = np.zeros((32, 64), "int32")
    mod(*mod.pack(a, w, c))
    np.testing.assert_array_equal(c, a.astype(np.int64) @ w.astype(np.int64).T)


def amx_tiled(M=64, N=64, K=256, steps=2):
    """W packed by 4; i and j in 32-wide tiles, k in `steps` steps of 64 (16 groups of 4),
    the unit's five loops innermost; the accumulators in a local tile."""
    sch = Schedule(dense_u8s8(M, N, K))
    b = sch.get_block("C")
    sch.pack_layout(b, 1, 4)
    i, j, k = sch.get_loops(b)
    i0, i1 = sch.split(i, [None, 32])
    j0, j1 = sch.split(j, [None, 32])
    k0, ko, kq, kr = sch.split(k, [None, steps, 16, 4])
    sch.reorder(i0, j0, k0, i1, j1, ko, kq, kr)
    sch.reverse_compute_at(sch.cache_write(b, 0, "local"), j0)
    sch.tensorize(i1, "x86_amx_u8s8_32x32")
    return sch


def test_amx_takes_any_number_of_steps_and_its_strides_at_run_time():
    amx = get_intrin("x86_amx_u8s8_32x32")
    assert amx.free == (2,) and amx.requires == ("amx_tile", "amx_int8")
    for steps in (1, 2, 4):
        sch = amx_tiled(K=256, steps=steps)
        assert sch.get(sch.get_loops(sch.get_block("C"))[-5]).annotation(TENSORIZE)
    assert "x86_amx_u8s8_32x32" in Target.create("llvm -mcpu=sapphirerapids").tensor_intrins()
    assert "x86_amx_u8s8_32x32" not in Target.create("llvm -mcpu=znver4").tensor_intrins()
    spaces = _rule_spaces(dense_u8s8(M=64, N=64, K=128),
                          Target.create("llvm -mcpu=sapphirerapids"))
    units = [t for t in ("x86_amx_u8s8_32x32", "x86_dot_u8s8_16x4")
             if any(f"intrin='{t}'" in s.trace.as_python() for s in spaces)]
    assert units == ["x86_amx_u8s8_32x32", "x86_dot_u8s8_16x4"]  # one set of spaces per family


@pytest.mark.cc
@pytest.mark.skipif(not X86, reason="x86 units")
def test_amx_code_for_a_machine_that_has_it_compiles_here():
    """On any x86 machine: the C for a Sapphire Rapids target configures the tiles, asks
    Linux for them, runs tile products, and compiles with that target's flags."""
    target = Target.create("llvm -mcpu=sapphirerapids")
    sch = amx_tiled()
    backend = Backend.for_target(target)
    source = backend.generate(sch)
    text = source.text
    assert "_tile_loadconfig" in text and "SYS_arch_prctl" in text and "_tile_dpbusd" in text
    assert "lt_intrin_x86_amx_u8s8_32x32(&C_local[0], &A[" in text
    assert "INT64_C(2))" in text  # two steps of 64 per call, held in tile registers
    artifact = backend.compile(source)  # -march=sapphirerapids: AMX's instructions assemble
    assert artifact.path


@pytest.mark.cc
def test_amx_computes_the_products_exactly_where_the_cpu_has_it():
    if not offered("x86_amx_u8s8_32x32"):
        pytest.skip("this CPU has no AMX (the code is checked by the test above)")
    for steps in (1, 4):
        mod = lt.build(amx_tiled(M=64, N=96, K=256, steps=steps), num_threads=1)
        a, w = full_range(64, 96, 256)
        c = np.full((64, 96), 5, "int32")
        mod(*mod.pack(a, w, c))
        np.testing.assert_array_equal(c, a.astype(np.int64) @ w.astype(np.int64).T)
