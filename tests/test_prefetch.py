"""Software prefetch (codegen/passes/prefetch.py): a loop annotated with a distance d fetches
the lines of the next row tile of the inputs it reads in place, guarded, and only there; the
result is the same; the interpreter never sees a prefetch."""
from __future__ import annotations

import re

import numpy as np
import pytest

import looptune as lt
from looptune import te
from looptune.build import generate_source
from looptune.codegen import lower
from looptune.codegen.passes.prefetch import MAX_LINES, PREFETCH
from looptune.schedule import Schedule
from looptune.tir.expr import PREFETCH_OP, Call
from looptune.tir.functor import visit
from looptune.tune import ScheduleRule, TuneContext
from looptune.tune.defaults import DEFAULT_RULES
from looptune.tune.mutator import MutatePrefetch
from looptune.tune.schedule_rule.multi_level_tiling import PREFETCH_DISTANCES
from looptune.tune.search_strategy.space import DesignSpace, finish_point, replay
from looptune.tune.space_generator import PostOrderApply


def matmul(M=64, N=48, K=40):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def row_tiles(func, rows: int, ahead: int):
    """i split into tiles of `rows` rows, the tile loop annotated to prefetch `ahead`."""
    sch = Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, rows])
    sch.reorder(i0, k, i1, j)
    sch.annotate(i0, PREFETCH, ahead)
    return sch.func


def prefetches(source: str) -> list:
    return re.findall(r"__builtin_prefetch\(&(\w+)\[([^\]]*)\], 0, 3\)", source)


def test_a_row_tile_prefetches_the_next_tiles_rows_of_the_input_read_in_place():
    # 4 rows of A (40 floats: 3 lines, or 4 where a row starts mid-line) per tile, and of
    # C (read by the accumulation); B is read whole by every tile (its region does not move
    # with i0): not prefetched
    src = generate_source(row_tiles(matmul(), 4, 1))[1]
    got = prefetches(src)
    assert {name for name, _ in got} == {"A", "C"}
    a = [idx for name, idx in got if name == "A"]
    assert len(a) == 4 * 4  # rows x (the first element of each line, the last element)
    # the next tile: rows 4 * (i_0 + 1) .. + 3 of 40 floats, i.e. from i_0 * 160 + 160
    assert sorted(int(re.fullmatch(r"i_0 \* 160 \+ (\d+)", idx).group(1)) for idx in a) == \
        sorted(160 + 40 * r + k for r in range(4) for k in (0, 16, 32, 39))
    assert "if (i_0 < 15)" in src  # the last tile has no next one
    assert not prefetches(generate_source(row_tiles(matmul(), 4, 0))[1])  # 0: none


def test_a_region_too_large_is_not_prefetched():
    # 16 rows of 40 floats: 64 > MAX_LINES prefetches per tile
    assert 16 * 4 > MAX_LINES
    assert not prefetches(generate_source(row_tiles(matmul(), 16, 1))[1])


@pytest.mark.cc
@pytest.mark.parametrize("ahead", [1, 2])
def test_prefetching_kernels_compute_the_same(ahead, rng):
    func = row_tiles(matmul(M=60), 4, ahead)  # with a partial last tile
    a = rng.uniform(-1, 1, (60, 40)).astype("float32")
    b = rng.uniform(-1, 1, (40, 48)).astype("float32")
    c = np.full((60, 48), np.nan, "float32")
    mod = lt.build(func)
    assert prefetches(mod.source)
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_the_interpreter_never_sees_a_prefetch():
    func = row_tiles(matmul(), 4, 1)
    found = {True: [], False: []}
    for vectorize in (True, False):
        visit(lower(func, vectorize=vectorize).body,
              lambda n: found[vectorize].append(n) if isinstance(n, Call) and
              n.op == PREFETCH_OP else None)
    assert found[True] and not found[False]


def prefetching_context(func, seed=0):
    rules = [ScheduleRule.create(n, **({**o, "prefetch": PREFETCH_DISTANCES}
                                       if n == "multi-level-tiling" else o))
             for n, o in DEFAULT_RULES["cpu"]]
    return TuneContext(func, space_generator=PostOrderApply(sch_rules=rules), seed=seed)


def test_the_search_can_choose_prefetch_per_candidate():
    """With multi-level tiling's `prefetch`, each space samples the distance once and
    annotates the loops of the third spatial level with it; MutatePrefetch changes it; the
    rendered kernel prefetches where the distance is 1 and not where it is 0."""
    import random
    func = matmul(M=96, N=64, K=64)
    ctx = prefetching_context(func)
    spaces = [DesignSpace(s.trace) for s in ctx.generate_design_space()]
    for space in spaces:
        assert list(space.tags.values()).count("prefetch") == 1
    rand = random.Random(0)
    seen = set()
    for _ in range(40):
        point = finish_point(replay(rand.choice(spaces), func, rand.randrange(1 << 30)),
                             ctx.postprocs)
        if point.candidate is None:
            continue
        sch = point.candidate.sch
        values = {sch.get(lp).annotation(PREFETCH) for blk in ("C",)
                  for lp in sch.get_loops(sch.get_block(blk))} - {None}
        assert len(values) == 1
        (ahead,) = values
        seen.add(ahead)
        if ahead == 0:
            assert not prefetches(generate_source(sch.func)[1])
        pos, new = MutatePrefetch().apply(point, rand)
        assert point.space.tags[pos] == "prefetch" and new != point.decisions[pos]
    assert seen == set(PREFETCH_DISTANCES)
