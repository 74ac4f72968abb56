"""How fast the search itself is, per candidate: fresh samples from the design space,
mutations (replayed from a snapshot), feature extraction (including the stage-1 lowering it
reads) and cost-model prediction, on matmul_add 1024 and conv2d; and one whole generation
step of EvolutionarySearch (a batch of 64) with the xgb model trained on 64 fake labels.

    python benchmarks/search_overhead.py [--json out.json]
"""
from __future__ import annotations

import argparse
import random
import time

from _common import print_table, write_json

from looptune import te
from looptune.backend import Backend
from looptune.target import Target
from looptune.te.ops import workload
from looptune.tune import TuneContext
from looptune.tune.cost_model import CostModel
from looptune.tune.database import MemoryDatabase
from looptune.tune.defaults import default_mutators
from looptune.tune.feature import extract
from looptune.tune.runner.base import RunnerResult
from looptune.tune.search_strategy.evolutionary import EvolutionarySearch
from looptune.tune.search_strategy.space import DesignSpace, finish_point, replay

WORKLOADS = {"matmul_add 1024": ("matmul_add", dict(M=1024, N=1024, K=1024)),
             "conv2d 1x64x56x56 3x3": ("conv2d", {})}


def per_second(n: int, secs: float) -> float:
    return n / secs if secs > 0 else float("inf")


def measure(label: str, name: str, shape: dict, n: int) -> dict:
    func = te.create_prim_func(workload(name, **shape)[0])
    ctx = TuneContext(func, "cpu", seed=0, search_strategy="replay-trace")
    spaces = [DesignSpace(s.trace) for s in ctx.generate_design_space()]
    rand = random.Random(0)

    t0 = time.perf_counter()
    points, tries = [], 0
    while len(points) < n:
        tries += 1
        try:
            p = finish_point(replay(rand.choice(spaces), func, rand.randrange(1 << 30)),
                             ctx.postprocs)
        except Exception:  # noqa: BLE001 - a refused sample counts as work done
            continue
        if p.candidate is not None:
            points.append(p)
    t_fresh = time.perf_counter() - t0

    muts = default_mutators(ctx.target)
    t0 = time.perf_counter()
    kids, tries_m = [], 0
    while len(kids) < n:
        tries_m += 1
        parent = rand.choice(points)
        m = rand.choices(list(muts), weights=list(muts.values()))[0]
        prop = m.apply(parent, rand)
        if prop is None:
            continue
        pos, d = prop
        try:
            child = replay(parent.space, func, rand.randrange(1 << 30),
                           decisions={**parent.decisions, pos: d}, base=parent, start=pos)
        except Exception:  # noqa: BLE001
            continue
        if finish_point(child, ctx.postprocs).candidate is not None:
            kids.append(child)
    t_mut = time.perf_counter() - t0

    # features need the stage-1 lowering, which verification computed already: time both
    cands = [p.candidate for p in kids]
    backend = Backend.for_target("cpu")
    t0 = time.perf_counter()
    for c in cands:
        backend.lower_loops(c.sch.func)  # a PrimFunc: computed again, not the memoized one
    t_lower = time.perf_counter() - t0
    t0 = time.perf_counter()
    extract(cands, target=Target.create("cpu"))
    t_feat = time.perf_counter() - t0

    model = CostModel.create("xgb")
    labels = [RunnerResult(run_secs=(1e-3 * (1 + rand.random()),)) for _ in cands]
    t0 = time.perf_counter()
    model.update(cands, labels)
    t_train = time.perf_counter() - t0
    t0 = time.perf_counter()
    model.predict(cands)
    t_pred = time.perf_counter() - t0

    es = EvolutionarySearch(cost_model=model)
    ctx2 = TuneContext(func, "cpu", seed=1, search_strategy=es)
    es.pre_tuning(max_trials=64, num_trials_per_iter=64,
                  design_spaces=ctx2.generate_design_space(), database=MemoryDatabase(),
                  seen=set())
    t0 = time.perf_counter()
    batch = es.generate_measure_candidates()
    t_batch = time.perf_counter() - t0
    return {"workload": label, "n": n,
            "fresh_per_s": per_second(n, t_fresh), "mutate_per_s": per_second(n, t_mut),
            "lower_ms": 1e3 * t_lower / n, "features_ms": 1e3 * t_feat / n,
            "features_total_ms": 1e3 * (t_lower + t_feat) / n,
            "predict_per_s": per_second(n, t_pred), "train_s": t_train,
            "batch_of_64_s": t_batch, "batch_size": len(batch or []),
            "fresh_tries": tries, "mutate_tries": tries_m}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=64, help="candidates per measurement")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = [measure(label, name, shape, args.n) for label, (name, shape) in WORKLOADS.items()]
    print(f"CPU: {Target.create('cpu').model}")
    print_table("search overhead per candidate (single process)", rows, [
        ("workload", "workload"), ("fresh_per_s", "fresh/s", "{:.0f}"),
        ("mutate_per_s", "mutants/s", "{:.0f}"), ("lower_ms", "lower ms", "{:.2f}"),
        ("features_ms", "extract ms", "{:.2f}"), ("features_total_ms", "features ms", "{:.2f}"),
        ("predict_per_s", "predict/s", "{:.0f}"), ("train_s", "train s", "{:.2f}"),
        ("batch_of_64_s", "batch of 64 s", "{:.1f}")])
    write_json(args.json, {"benchmark": "search_overhead", "rows": rows})


if __name__ == "__main__":
    main()
