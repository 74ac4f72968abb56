"""Transfer: a cost model warm-started from one workload's records tunes a related workload
faster. Tunes matmul 256x256x256 (the source) with random schedules, then tunes the
related matmul 256x512x256 twice with the evolutionary search, once with a fresh XGB model
and once with one warm-started from the source's records, over a few seeds, and prints the
median best-so-far at a few trial counts. Single-threaded; every run measures for real, so
expect noise of a few percent. (The evolutionary search's fresh model already ranks by an
analytic prior, so the warm start has a strong baseline to beat.)

    python examples/transfer_cost_model.py [--source-trials 96] [--trials 32] [--seeds 3]
"""
from __future__ import annotations

import argparse
import math
import statistics
import tempfile

from looptune import te
from looptune.te.ops import workload
from looptune.tune import EvaluatorConfig, tune_tir
from looptune.tune.cost_model import CostModel


def matmul(m: int, n: int, k: int):
    return te.create_prim_func(workload("matmul", M=m, N=n, K=k)[0])


def curve(db, func) -> list:
    recs = sorted(db.records_of(db.key_of(func)), key=lambda r: r.time)
    best, out = math.inf, []
    for r in recs:
        best = min(best, r.median_secs)
        out.append(best)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source-trials", type=int, default=96)
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    one = EvaluatorConfig(num_threads=1)
    source, target = matmul(256, 256, 256), matmul(256, 512, 256)

    src_dir = tempfile.mkdtemp(prefix="transfer-source-")
    src_db = tune_tir(source, "cpu", src_dir, max_trials_global=args.source_trials,
                      num_trials_per_iter=16, strategy="replay-trace", seed=0, evaluator=one)
    runs = {"fresh": [], "warm-started": []}
    for seed in range(args.seeds):
        for name in runs:
            model = CostModel.create("xgb")
            if name == "warm-started":
                used = model.warm_start(src_db, "cpu", exclude=target)
                print(f"warm start: trained on {used} records of matmul 256x256x256")
            db = tune_tir(target, "cpu", tempfile.mkdtemp(prefix=f"transfer-{name}-"),
                          max_trials_global=args.trials, num_trials_per_iter=8, seed=seed,
                          cost_model=model, evaluator=one)
            c = curve(db, target)
            runs[name].append(c + [c[-1]] * (args.trials - len(c)))
    curves = {name: [statistics.median(col) for col in zip(*cs)] for name, cs in runs.items()}

    flop = 2 * 256 * 512 * 256
    marks = [n for n in (8, 16, 24, 32, 64, 128) if n <= args.trials]
    print(f"\nmatmul 256x512x256, median best-so-far GFLOP/s over {args.seeds} seeds, by trials "
          "(one thread)")
    print(f"{'model':14s}" + "".join(f"{n:>8d}" for n in marks))
    for name, c in curves.items():
        print(f"{name:14s}" + "".join(f"{flop / c[min(n, len(c)) - 1] / 1e9:8.1f}" for n in marks))
    final = min(curves["fresh"][-1], curves["warm-started"][-1])
    for name, c in curves.items():
        hit = next((i + 1 for i, s in enumerate(c) if s <= final / 0.9), None)
        print(f"{name}: reaches 90% of the better final result at trial {hit or 'never'}")


if __name__ == "__main__":
    main()
