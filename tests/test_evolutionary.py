"""EvolutionarySearch with a fake builder and timer (pure Python): budgets, no duplicates,
resume from the database, learning beats random sampling on a learnable objective, and a
design space with no valid candidate says why."""
from __future__ import annotations

import warnings

import pytest

from looptune import te
from looptune.te.ops import workload
from looptune.target import Target
from looptune.tir.functor import collect_realizes, find_stmts
from looptune.tir.stmt import For
from looptune.tune import (Builder, BuilderResult, MemoryDatabase, Postproc, Runner,
                           RunnerResult, TuneContext, tune_tir)
from looptune.tune.defaults import DEFAULT_RULES
from looptune.tune.schedule_rule import ScheduleRule
from looptune.tune.search_strategy.evolutionary import EvolutionarySearch
from looptune.tune.space_generator import PostOrderApply

# no cap on the search's share of wall time: the fake runner takes none
SMALL = dict(population_size=24, init_min_unmeasured=12, genetic_num_iters=2,
             max_search_share=None)


def small(name="matmul", **shape):
    return te.create_prim_func(workload(name, **(shape or dict(M=64, N=64, K=64)))[0])


def synthetic_secs(func) -> float:
    """A learnable stand-in for a timer: faster with a larger register tile around the
    reduction's update (its vectorized loop's length times the rows of the loop right around
    it, up to 4 rows; a write-back or copy loop's vectors do not count) and with more
    unrolling (pragma_auto_unroll_max_step, which the rules put on the root block; both
    visible in the features)."""
    loops = find_stmts(func.body, For)

    def updates(lp):
        return lp.kind == "vectorized" and any(
            iv.kind == "R" for br in collect_realizes(lp.body) for iv in br.block.iter_vars)

    vec = max((lp.extent for lp in loops if updates(lp)), default=1)
    rows = max((lp.extent for lp in loops if isinstance(lp.body, For) and updates(lp.body)),
               default=1)
    steps = [n.annotation("pragma_auto_unroll_max_step") for n in (func.root, *loops)]
    unrolled = max((int(s) + 1 for s in steps if s is not None), default=1)
    return 1e-3 / (vec * min(rows, 4)) + 1e-4 / unrolled ** 0.5


class FakeBuilder(Builder):
    def build(self, inputs):
        out = []
        for inp in inputs:
            from looptune.tir.structural import structural_hash
            h = structural_hash(inp.func)
            out.append(BuilderResult(artifact=repr(synthetic_secs(inp.func)), symbol="k",
                                     source_hash=h))
        return out


class FakeRunner(Runner):
    def __init__(self):
        self.ran = 0

    def run(self, inputs):
        self.ran += len(inputs)
        return [RunnerResult(run_secs=(float(i.artifact),) * 3) for i in inputs]


def run(func, trials, db, strategy, seed=0, per_iter=8, target="cpu", rules="default"):
    return tune_tir(func, target, database=db, max_trials_global=trials, seed=seed,
                    num_trials_per_iter=per_iter, strategy=strategy, builder=FakeBuilder(),
                    runner=FakeRunner(), check_correctness=False, progress=False,
                    space=PostOrderApply(sch_rules=rules if rules == "default" else
                                         [ScheduleRule.create(n, **o) for n, o in rules]))


def best(db, k=1):
    """The mean time of the k fastest records."""
    return sum(sorted(r.median_secs for r in db.get_all_tuning_records())[:k]) / k


def test_budget_no_duplicates_and_resume():
    db = MemoryDatabase()
    run(small(), 16, db, EvolutionarySearch(cost_model="xgb", **SMALL))
    first = {r.sch_hash for r in db.get_all_tuning_records()}
    assert len(first) == 16
    run(small(), 32, db, EvolutionarySearch(cost_model="xgb", **SMALL))
    recs = db.get_all_tuning_records()
    assert len(recs) == 32 and len({r.sch_hash for r in recs}) == 32
    assert first <= {r.sch_hash for r in recs}


def test_the_first_generation_starts_from_the_best_records():
    db = MemoryDatabase()
    func = small()
    run(func, 16, db, EvolutionarySearch(cost_model="random", **SMALL))
    top = min(db.get_all_tuning_records(), key=lambda r: r.median_secs)
    es = EvolutionarySearch(cost_model="random", **SMALL)
    ctx = TuneContext(func, search_strategy=es, seed=5)
    es.pre_tuning(max_trials=8, num_trials_per_iter=8, design_spaces=ctx.generate_design_space(),
                  database=db, seen=set())
    pop = es.sample_initial_population()
    assert top.sch_hash in {p.candidate.sch_hash for p in pop}
    # and the model learned from the earlier records before proposing anything
    assert es.cost_model.num_trained == 16


def test_an_untrained_model_first_learns_from_other_workloads():
    """Transfer: with nothing measured on its own workload, the model trains on the
    database's records of other workloads before the first batch (transfer_records of them);
    with records of its own workload it learns from those instead; 0 (the default) turns
    transfer off."""
    db = MemoryDatabase()
    run(small(), 16, db, EvolutionarySearch(cost_model="xgb", **SMALL))

    def prepared(func, **params):
        es = EvolutionarySearch(cost_model="xgb", **{**SMALL, "transfer_records": 256, **params})
        ctx = TuneContext(func, search_strategy=es, seed=5)
        es.pre_tuning(max_trials=8, num_trials_per_iter=8,
                      design_spaces=ctx.generate_design_space(), database=db, seen=set())
        return es

    other = small(M=32, N=64, K=64)
    es = prepared(other)
    assert es.transferred == 16 and es.cost_model.num_trained == 16
    assert prepared(other, transfer_records=10).transferred == 10  # the newest ten
    off = EvolutionarySearch(cost_model="xgb", **SMALL)
    ctx = TuneContext(other, search_strategy=off, seed=5)
    off.pre_tuning(max_trials=8, num_trials_per_iter=8, design_spaces=ctx.generate_design_space(),
                   database=db, seen=set())
    assert off.transferred == 0 and off.cost_model.num_trained == 0
    own = prepared(small())
    assert own.transferred == 0 and own.cost_model.num_trained == 16


def test_learning_finds_faster_schedules_than_random_sampling():
    """In the same 40 trials, evolutionary search with the xgb model finds a strictly faster
    schedule than random sampling on most of five seeds, is never slower (random sampling may
    find the fastest schedule of the space too), its five fastest are faster on every seed,
    and by at least 25% over the seeds (geometric mean). A fixed AVX2 target and a fixed rule
    set (the CPU rules without the packed-panel spaces, which only add copy loops the
    synthetic timer cannot judge, and without the prefetch choice, which it cannot see
    either) keep the design space (and so the outcome) the same on
    every host and whatever the defaults become; the timer judges only the update's register
    tile and the unrolling, which the postprocessors do not change (vectorizing a long
    write-back loop in parts made the former objective, any vector loop's length, easy to max
    out by chance). (The model's analytic prior already favours
    long vectors and unrolling: this checks the search as a whole, not what the trees
    learn.)"""
    func = small(M=128, N=128, K=64)
    avx2 = Target(kind="cpu", arch="x86_64", features=("avx2", "fma"), cores=2,
                  vector_bits=256)
    rules = [(n, {**o, "read_levels": (), "prefetch": ()} if n == "multi-level-tiling" else o)
             for n, o in DEFAULT_RULES["cpu"]]
    wins, top5 = 0, 1.0
    for seed in range(5):
        random_db, evo_db = MemoryDatabase(), MemoryDatabase()
        run(func, 40, random_db, "replay-trace", seed=seed, target=avx2, rules=rules)
        run(func, 40, evo_db, EvolutionarySearch(cost_model="xgb", **SMALL), seed=seed,
            target=avx2, rules=rules)
        assert best(evo_db) <= best(random_db), seed
        assert best(evo_db, 5) < best(random_db, 5), seed
        wins += best(evo_db) < best(random_db)
        top5 *= best(evo_db, 5) / best(random_db, 5)
    assert wins >= 3
    assert top5 ** (1 / 5) < 0.75


def test_no_valid_candidate_ends_with_a_reason():
    @Postproc.registry.register("test-evo-reject-all")
    class RejectAll(Postproc):
        def apply(self, sch):
            return False

    space = PostOrderApply(postprocs=["test-evo-reject-all"])
    db = MemoryDatabase()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tune_tir(small(), "cpu", database=db, max_trials_global=8, num_trials_per_iter=8,
                 space=space, strategy=EvolutionarySearch(cost_model="random", **SMALL),
                 builder=FakeBuilder(), runner=FakeRunner(), check_correctness=False,
                 progress=False, seed=0)
    msgs = [str(w.message) for w in caught]
    assert any("no valid candidate" in m and "postprocessor refused" in m for m in msgs), msgs
    assert not db.get_all_tuning_records()


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="populaton_size"):
        EvolutionarySearch(populaton_size=10)
    with pytest.raises(ValueError, match="space_floor_share must be a share"):
        EvolutionarySearch(space_floor_share=1.5)
    with pytest.raises(ValueError, match="space_focus must be a number"):
        EvolutionarySearch(space_focus=-1)
    with pytest.raises(ValueError, match="unknown cost model"):
        EvolutionarySearch(cost_model="gbdt")
    with pytest.raises(ValueError, match="unknown mutator"):
        TuneContext(small(), search_strategy=EvolutionarySearch(mutator_probs={"tile": 1.0}))


def test_search_stops_evolving_once_it_took_its_share_of_the_time(monkeypatch):
    """With measurement nearly free (the fake runner), a capped search evolves no further
    than its first generation after the first batch; uncapped it runs every generation."""
    generations = []
    orig = EvolutionarySearch._next_generation

    def counting(self, population, scores):
        generations.append(self.trials)
        return orig(self, population, scores)

    monkeypatch.setattr(EvolutionarySearch, "_next_generation", counting)
    params = {**SMALL, "max_search_share": 0.2}
    run(small(), 32, MemoryDatabase(), EvolutionarySearch(cost_model="random", **params))
    capped = len(generations)
    generations.clear()
    run(small(), 32, MemoryDatabase(), EvolutionarySearch(cost_model="random", **SMALL))
    assert len(generations) == 4 * SMALL["genetic_num_iters"]  # 4 batches of 8
    assert capped <= SMALL["genetic_num_iters"] + 1  # the first batch only (and maybe one)


def _tiles(trace):
    from looptune.tune.search_strategy.space import DesignSpace
    space = DesignSpace(trace)
    return [d for p, d in space.decisions_of(trace).items() if space.tags[p] == "tile"]


def test_a_tasks_best_decisions_are_tried_by_its_look_alike_tasks(monkeypatch):
    # matmul and matmul_add of one shape tile the same loops: a new best of one is offered
    # to the other, which measures those tile decisions in its next batch
    offered, tried = [], []
    real = EvolutionarySearch._with_transfers

    def spy(self, picks, n):
        offers = list(self._offers)
        out = real(self, picks, n)
        if offers:
            offered.append([_tiles(t) for t in offers])
            tried.append(_tiles(out[0].candidate.sch.trace))
        return out

    strategies = {}
    real_pre = EvolutionarySearch.pre_tuning

    def pre(self, **kw):
        strategies[self.context.task_name] = self
        return real_pre(self, **kw)

    monkeypatch.setattr(EvolutionarySearch, "_with_transfers", spy)
    monkeypatch.setattr(EvolutionarySearch, "pre_tuning", pre)
    funcs = {"mm": small("matmul"), "mm_add": small("matmul_add"), "other": small(M=32, N=64, K=64)}
    tune_tir(funcs, "cpu", database=MemoryDatabase(), max_trials_global=48, seed=0,
             num_trials_per_iter=8, strategy=EvolutionarySearch(cost_model="random", **SMALL),
             builder=FakeBuilder(), runner=FakeRunner(), check_correctness=False,
             progress=False, task_scheduler="round-robin")
    assert strategies["mm"].signature() == strategies["mm_add"].signature()
    assert strategies["other"].signature() != strategies["mm"].signature()
    assert offered and all(t in o for t, o in zip(tried, offered))
    assert not strategies["other"]._offers


def test_a_design_space_smaller_than_the_budget_stops_with_a_reason():
    # relu has a handful of distinct schedules: the search measures them and says why it stops
    strategy = EvolutionarySearch(cost_model="random", **SMALL)
    db = MemoryDatabase()
    run(small("relu", N=1, C=4, H=4, W=8), 64, db, strategy)
    n = len(db.get_all_tuning_records())
    assert 0 < n < 64
    assert "no schedule it has not measured" in strategy.stop_reason
    assert f"about {n} distinct schedules" in strategy.stop_reason


def test_space_quotas_split_a_batch_by_each_spaces_fastest_kernel():
    from looptune.tune.search_strategy.evolutionary import space_quotas
    inf = float("inf")
    assert space_quotas(64, [inf] * 4, floor_share=0.25, focus=4.0) == [16] * 4
    parts = space_quotas(64, [1.0, 1.6, 1.6, 1.0], floor_share=0.25, focus=4.0)
    assert sum(parts) == 64 and min(parts) >= 4
    assert parts[0] == parts[3] > 2 * parts[1] and parts[1] == parts[2]
    # nothing measured in a space yet: it weighs as the fastest
    assert space_quotas(10, [2.0, inf], floor_share=0.0, focus=4.0) == [5, 5]
    assert space_quotas(7, [1.0, 100.0, 3.0], floor_share=1.0, focus=4.0) in \
        ([3, 2, 2], [2, 3, 2], [2, 2, 3])
    assert space_quotas(0, [1.0, 2.0], floor_share=0.25, focus=4.0) == [0, 0]


def _copies(func) -> bool:
    """The schedule copies an input per tile (a packed-panel design space): an extra block."""
    from looptune.tir.stmt import BlockRealize
    return len(find_stmts(func.body, BlockRealize)) > 3  # root, matmul, its write-back


class PanelsFastBuilder(FakeBuilder):
    """A timer under which every packed-panel schedule runs faster than any other."""

    def build(self, inputs):
        from dataclasses import replace
        return [replace(res, artifact=repr(float(res.artifact) + (0 if _copies(inp.func)
                                                                  else 1e-3)))
                for inp, res in zip(inputs, super().build(inputs))]


def test_measurements_steer_the_trials_to_the_design_space_that_runs_fastest():
    """With a model that knows nothing (random scores), the batches follow each space's
    fastest measured kernel: the packed-panel spaces, faster under this timer, get most
    of the trials after the first batch, and every space keeps its floor. Ranking all spaces
    together (space_floor_share None), the useless model spreads them evenly instead."""
    func = small(M=128, N=128, K=64)
    avx2 = Target(kind="cpu", arch="x86_64", features=("avx2", "fma"), cores=2,
                  vector_bits=256)
    shares = {}
    for floor in (0.25, None):
        strategy = EvolutionarySearch(cost_model="random", **SMALL, space_floor_share=floor)
        tune_tir(func, avx2, database=MemoryDatabase(), max_trials_global=96, seed=0,
                 num_trials_per_iter=16, strategy=strategy, builder=PanelsFastBuilder(),
                 runner=FakeRunner(), check_correctness=False, progress=False)
        copies = [any("CacheRead(" in step for step in s.structure)
                  for s in strategy.spaces]
        assert sum(copies) == 2, copies  # (B copied or not) x (two write levels)
        panel = sum(n for i, n in strategy.space_trials.items() if copies[i])
        shares[floor] = panel / sum(strategy.space_trials.values())
        if floor is not None:
            assert min(strategy.space_trials[i] for i in range(4)) >= 4  # the floor
    assert shares[0.25] >= 0.72, shares
    assert shares[None] < 0.66, shares


def test_search_workers_replay_the_same_candidates_as_the_tuners_own_process():
    """Search workers (child processes) replay, postprocess and featurize the candidates,
    the search draws every choice itself: in- and out-of-process searches of one seed propose
    the same batches, over two batches (the second mutating measured points); the workers'
    points carry no schedule until picked, and a picked one is replayed here."""
    from looptune.tune.search_strategy.workers import PendingCandidate

    proposed = {}
    for workers in (0, 2):
        db = MemoryDatabase()
        es = EvolutionarySearch(cost_model="xgb", search_workers=workers, **SMALL)
        run(small(), 16, db, es)
        proposed[workers] = [r.sch_hash for r in db.get_all_tuning_records()]
        if workers:
            assert es._task is not None and not es._in_process
            # the first round's 8 samples go to the workers (a retry round of fewer than
            # 2 per worker is replayed here)
            pending = [p for p in es.sample_fresh(8) if isinstance(p.candidate, PendingCandidate)]
            assert pending and all(p.sch is None for p in pending)
            full = es._materialize(pending[0])
            assert full.sch is not None
            assert full.candidate.sch_hash == pending[0].candidate.sch_hash
    assert sorted(proposed[0]) == sorted(proposed[2]) and len(set(proposed[0])) == 16


def test_a_postprocessor_the_workers_cannot_load_keeps_the_search_in_process():
    """A postprocessor defined in a function cannot travel to a worker: the search replays
    its candidates itself, and they are postprocessed by it."""
    seen = []

    class Counting(Postproc):
        def apply(self, sch):
            seen.append(1)
            return True

    func = small()
    es = EvolutionarySearch(cost_model="random", search_workers=2, **SMALL)
    ctx = TuneContext(func, space_generator=PostOrderApply(postprocs=[Counting()]),
                      search_strategy=es, seed=1)
    es.pre_tuning(max_trials=8, num_trials_per_iter=8, design_spaces=ctx.generate_design_space(),
                  database=None, seen=set())
    pop = es.sample_fresh(12)
    assert len(pop) == 12 and es._in_process and all(p.sch is not None for p in pop)
    assert len(seen) >= 12


def test_looptune_workers_0_keeps_the_search_in_the_tuners_process(monkeypatch):
    """LOOPTUNE_WORKERS=0 starts no worker (every point keeps its schedule); a value that is
    not a count is refused with the variable's name."""
    from looptune.tune.search_strategy.workers import default_workers
    monkeypatch.setenv("LOOPTUNE_WORKERS", "0")
    es = EvolutionarySearch(cost_model="random", **SMALL)
    ctx = TuneContext(small(), search_strategy=es, seed=1)
    es.pre_tuning(max_trials=8, num_trials_per_iter=8, design_spaces=ctx.generate_design_space(),
                  database=None, seen=set())
    pop = es.sample_fresh(12)
    assert len(pop) == 12 and es._task is None and all(p.sch is not None for p in pop)
    monkeypatch.setenv("LOOPTUNE_WORKERS", "many")
    with pytest.raises(ValueError, match="LOOPTUNE_WORKERS"):
        default_workers()
