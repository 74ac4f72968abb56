"""Program features: width and names, determinism, what the loop-kind columns say, and every
registered operator's design-space samples (pure Python)."""
from __future__ import annotations

import random

import numpy as np
import pytest

from looptune import te
from looptune.schedule import Schedule
from looptune.target import Target
from looptune.te import ops
from looptune.tune.context import TuneContext
from looptune.tune.feature import (FEATURE_VERSION, FEATURE_WIDTH, FeatureExtractor,
                                   PerStoreFeature, extract, feature_docs, feature_names)
from looptune.tune.search_strategy.replay_trace import sample_from
from workloads_small import SMALL

TARGET = Target(kind="cpu", arch="x86_64", features=("avx2", "fma"), cores=2, vector_bits=256,
                l1d_bytes=32 * 1024, l2_bytes=512 * 1024, l3_bytes=16 << 20)


def matmul(n=64):
    return te.create_prim_func(ops.workload("matmul", M=n, N=n, K=n)[0])


def samples(func, n, seed=0):
    ctx = TuneContext(func, TARGET, seed=seed)
    spaces = ctx.generate_design_space()
    rand = random.Random(seed)
    out, tries = [], 0
    while len(out) < n and tries < 20 * n:
        tries += 1
        cand = sample_from(rand.choice(spaces), func, rand.randrange(1 << 30), ctx.postprocs)
        if cand is not None:
            out.append(cand)
    return out


def col(name):
    return feature_names().index(name)


def test_names_width_version_and_registry():
    names = feature_names()
    assert len(names) == FEATURE_WIDTH == len(set(names)) == len(feature_docs())
    assert FEATURE_VERSION == 3
    ex = FeatureExtractor.create("per-store")
    assert isinstance(ex, PerStoreFeature) and ex.width == FEATURE_WIDTH
    assert FeatureExtractor.create(ex) is ex
    with pytest.raises(ValueError, match="per-store"):
        FeatureExtractor.create("nope")


def test_deterministic_and_shaped():
    cands = samples(matmul(), 4)
    a = extract(cands, TARGET)
    b = extract(cands, TARGET)
    assert len(cands) == 4
    for x, y in zip(a, b, strict=True):
        assert x.dtype == np.float32 and x.ndim == 2 and x.shape[1] == FEATURE_WIDTH
        assert x.shape[0] >= 2  # the init and update stores at least
        assert np.array_equal(x, y) and np.isfinite(x).all()
    # a Schedule and an unlowered PrimFunc are accepted and give the same rows
    c = cands[0]
    assert np.array_equal(extract([c.sch], TARGET)[0], a[0])
    assert np.array_equal(extract([c.sch.func], TARGET)[0], a[0])


def test_different_schedules_differ():
    cands = samples(matmul(), 6)
    feats = extract(cands, TARGET)
    distinct = {f.tobytes() for f in feats}
    assert len(distinct) == len({c.sch_hash for c in cands}) > 1


def _hand(split_j=(16, 4), vec=True, unroll=True, par=True):
    sch = Schedule(matmul(), seed=0)
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    jo, ji = sch.split(j, list(split_j))
    ko, ki = sch.split(k, [16, 4])
    sch.reorder(i, jo, ko, ki, ji)
    if par:
        sch.parallel(i)
    if unroll:
        sch.unroll(ki)
    if vec:
        sch.vectorize(ji)
    return sch


def test_loop_kind_columns():
    plain = extract([_hand(vec=False, unroll=False, par=False)], TARGET)[0]
    f = extract([_hand()], TARGET)[0]
    update = f[np.argmax(f[:, col("float_mad")])]  # the update statement C += A * B
    log = lambda x: np.log2(1 + x)  # noqa: E731
    assert update[col("vec_num")] == 1 and update[col("vec_len")] == pytest.approx(log(4))
    assert update[col("vec_prod")] == pytest.approx(log(4))
    assert update[col("vec_pos_inner_spatial")] == 1
    assert update[col("unroll_num")] == 1 and update[col("unroll_len")] == pytest.approx(log(4))
    assert update[col("unroll_pos_inner_reduce")] == 1
    assert update[col("parallel_num")] == 1
    assert update[col("parallel_len")] == pytest.approx(log(64))
    assert update[col("parallel_pos_outer_spatial")] == 1
    assert update[col("float_mad")] == pytest.approx(log(64 ** 3))
    assert update[col("trip")] == pytest.approx(log(64 ** 3))
    assert update[col("num_reduce_loops")] == 2
    for name in ("vec_num", "unroll_num", "parallel_num", "vec_len"):
        assert plain[:, col(name)].max() == 0
    wider = extract([_hand(split_j=(8, 8))], TARGET)[0]
    assert wider[:, col("vec_len")].max() == pytest.approx(log(8))


def test_access_columns_on_matmul():
    f = extract([_hand(vec=False, unroll=False, par=False)], TARGET)[0]
    update = f[np.argmax(f[:, col("float_mad")])]
    slots = [{n.split(".", 1)[1]: update[col(n)] for n in feature_names()
              if n.startswith(f"buf{k}.")} for k in range(3)]
    # C is read and written, A and B are read; 64*64*64 accesses of 4 bytes each, C twice
    assert sorted((s["read"], s["write"], s["rw"]) for s in slots) == \
        [(0, 0, 1), (1, 0, 0), (1, 0, 0)]
    log = lambda x: np.log2(1 + x)  # noqa: E731
    assert all(s["unique_bytes"] == pytest.approx(log(64 * 64 * 4)) for s in slots)
    rw = next(s for s in slots if s["rw"])
    # the loop order is i, jo, ko, ki, ji: C[i, j] does not move with ki -> reuse carried there
    assert rw["stride"] == pytest.approx(log(1)) and rw["stride_depth"] == 1
    assert rw["reuse_depth"] == 2 and rw["reuse_ct"] == pytest.approx(log(4))
    a = [s for s in slots if s["read"]]
    # A[i, k] does not move with the innermost ji (reuse there); B[k, j] only not with i
    assert sorted(s["reuse_depth"] for s in a) == [1, 5]


def test_cache_fit_follows_the_target():
    small = Target(**{**TARGET.__dict__, "l1d_bytes": 1024, "l2_bytes": 4096, "l3_bytes": 8192})
    sch = _hand()
    big, tiny = extract([sch], TARGET)[0], extract([sch], small)[0]
    assert big[:, col("l3_fit_all")].min() == 1           # 3 * 16 KiB fit in 16 MiB
    assert tiny[:, col("l3_fit_all")].max() == 0
    assert (tiny[:, col("l1_fit_loops")] <= big[:, col("l1_fit_loops")]).all()


def test_local_allocation_columns():
    cands = samples(matmul(), 8)
    feats = np.concatenate(extract(cands, TARGET))
    local = feats[:, col("store_local")] == 1
    assert local.any()  # the design space writes through a local cache
    assert (feats[local, col("alloc_bytes")] > 0).all()


@pytest.mark.parametrize("name", sorted(ops.OPS))
def test_every_operator_design_space(name):
    params = SMALL.get(name, {})
    func = te.create_prim_func(ops.workload(name, **params)[0])
    cands = samples(func, 3, seed=1)
    assert cands, f"no candidate sampled for {name}"
    for f in extract(cands, TARGET):
        assert f.shape[1] == FEATURE_WIDTH and f.shape[0] >= 1 and np.isfinite(f).all()


def _register_tiled(ii=4, ji=16):
    """matmul 64 with a register block of ii rows (unrolled) x ji columns (vectorized)
    inside the reduction loop k."""
    sch = Schedule(matmul(), seed=0)
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    io, i_in = sch.split(i, [64 // ii, ii])
    jo, j_in = sch.split(j, [64 // ji, ji])
    sch.reorder(io, jo, k, i_in, j_in)
    sch.unroll(i_in)
    sch.vectorize(j_in)
    return sch


@pytest.mark.parametrize("bits", [256, 512])
def test_register_block_columns(bits):
    target = Target(**{**TARGET.__dict__, "vector_bits": bits})
    lanes = bits // 32
    f = extract([_register_tiled(4, 16)], target)[0]
    update = f[np.argmax(f[:, col("float_mad")])]
    log = lambda x: np.log2(1 + x)  # noqa: E731
    vectors = 4 * (16 // lanes)  # 4 rows of 16 columns: 8 AVX2 or 4 AVX-512 registers
    assert update[col("rb_elems")] == pytest.approx(log(64))
    assert update[col("rb_vectors")] == pytest.approx(log(vectors))
    # per step of k: 4 broadcasts of A[i, k] and one 16-wide row of B[k, j]
    assert update[col("rb_load_vectors")] == pytest.approx(log(4 + 16 // lanes))
    assert update[col("rb_loads_per_vector")] == pytest.approx((4 + 16 // lanes) / vectors)
    assert update[col("rb_spill")] == 0 and update[col("rb_unrolled")] == 1
    assert update[col("rb_reduce_steps")] == pytest.approx(log(64))  # all of k in registers
    assert update[col("vec_lane_use")] == 1
    # 16 rows of 32 columns need far more registers than either ISA has
    big = extract([_register_tiled(16, 32)], target)[0]
    big_update = big[np.argmax(big[:, col("float_mad")])]
    regs = 32 if bits == 512 else 16
    assert big_update[col("rb_spill")] == pytest.approx(log(16 * 32 // lanes + 2 - regs))


def test_a_tail_is_counted_in_vector_pieces():
    target = Target(**{**TARGET.__dict__, "vector_bits": 512})
    f = extract([_register_tiled(4, 32), _hand(split_j=(64 // 28 + 1, 28))], target)
    assert f[0][:, col("vec_lane_use")].max() == 1
    # 28 lanes are emitted as 16 + 8 + 4: 28 of 48 lanes used
    assert f[1][:, col("vec_lane_use")].max() == pytest.approx(28 / 48)


# ------------------------------------------------------------------------------ GPU columns
def test_gpu_columns_describe_the_launch_shared_memory_and_coalescing():
    from gpu_schedules import shared_matmul

    from looptune.target import cuda_target
    gpu = cuda_target("sm_80")
    sch = shared_matmul(M=32, N=32, K=32, tile=8, k_tile=8)
    (f,) = extract([sch], gpu)
    names = feature_names()
    raw = {n: np.exp2(f[:, col(n)].astype(np.float64)) - 1 for n in names}
    log2 = lambda x: np.log2(1.0 + x)  # noqa: E731
    assert np.allclose(f[:, col("gpu_blocks")], log2(16))  # (32 / 8) ** 2 blocks
    assert np.allclose(f[:, col("gpu_threads")], log2(64))  # 8 x 8 threads each
    assert np.allclose(f[:, col("gpu_threads_x")], log2(64))
    assert np.allclose(f[:, col("gpu_blocks_per_sm")], log2(16 / gpu.cores))
    stores_shared = f[:, col("store_shared")] == 1
    assert stores_shared.sum() == 2  # the copies into A_shared and B_shared
    assert np.allclose(raw["shared_bytes"][stores_shared], 2 * 8 * 8 * 4)
    # a shared-memory operand is marked; the copies read global memory along threadIdx.x
    # with a stride of 1 (B: a row of the tile) or by rows of 8 (A: 8 threads per row)
    shared_reads = [f[r, col(f"buf{k}.shared")] for r in range(len(f)) for k in range(5)]
    assert sum(x == 1 for x in shared_reads) >= 2
    strides = sorted(raw["buf1.thread_stride"][stores_shared].round().astype(int))
    assert strides[0] == 1
    # on a CPU candidate the GPU columns are 0
    (cpu,) = extract(samples(matmul(), 1), TARGET)
    for n in ("gpu_blocks", "gpu_threads", "gpu_threads_x", "gpu_blocks_per_sm",
              "gpu_thread_trip", "store_shared", "shared_bytes"):
        assert (cpu[:, col(n)] == 0).all(), n


def test_gpu_schedules_that_differ_only_in_threads_have_different_features():
    from gpu_schedules import shared_matmul

    from looptune.target import cuda_target
    a, b = (shared_matmul(M=32, N=32, K=32, tile=t, k_tile=8) for t in (4, 8))
    fa, fb = extract([a, b], cuda_target("sm_80"))
    assert fa[:, col("gpu_threads")].max() < fb[:, col("gpu_threads")].max()
    # each thread copies more of the (smaller) tiles when there are fewer threads
    copies_a, copies_b = (f[f[:, col("store_shared")] == 1] for f in (fa, fb))
    assert (copies_a[:, col("gpu_thread_trip")] > copies_b[:, col("gpu_thread_trip")]).all()
