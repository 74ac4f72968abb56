"""What a cost model warm-started from other workloads' records buys (transfer): tune the
source workloads once into a database, then tune the target workload on copies of it, with
EvolutionarySearch's transfer on (the model first trains on up to `transfer_records` records
of other workloads) and off (it starts from the analytic prior), over several seeds, one
thread. Prints the best kernel found after 16/32/64/... trials (median over seeds, as a
ratio to the best any run found), the trials each needs to reach 95% of that, and the
seconds the warm start took.

    python benchmarks/transfer.py [--source matmul512 conv2d] [--source-trials 128]
                                  [--target matmul_add1024] [--trials 64] [--seeds 0 1 2]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: E402

from looptune import te  # noqa: E402
from looptune.target import Target  # noqa: E402
from looptune.te.ops import workload  # noqa: E402
from looptune.tune import EvaluatorConfig, tune_tir  # noqa: E402
from looptune.tune.search_strategy.evolutionary import EvolutionarySearch  # noqa: E402

WORKLOADS = {
    "matmul512": ("matmul", dict(M=512, N=512, K=512)),
    "matmul_add1024": ("matmul_add", dict(M=1024, N=1024, K=1024)),
    "dense": ("dense", {}),
    "conv2d": ("conv2d", {}),
    "conv2d_s2": ("conv2d", dict(N=1, C=128, H=28, W=28, K=256, R=3, S=3, stride=2, pad=1)),
}


def func_of(name: str):
    op, shape = WORKLOADS[name]
    return te.create_prim_func(workload(op, **shape)[0])


def curve_of(db, func) -> list:
    """Best seconds after each trial of func, in measurement order."""
    recs = sorted(db.records_of(db.key_of(func), Target.create("cpu")), key=lambda r: r.time)
    best, out = float("inf"), []
    for r in recs:
        if r.ok and not r.baseline:
            best = min(best, r.median_secs)
        out.append(best)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", nargs="+", default=["matmul512", "conv2d"],
                    choices=list(WORKLOADS))
    ap.add_argument("--source-trials", type=int, default=128)
    ap.add_argument("--target", default="matmul_add1024", choices=list(WORKLOADS))
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--per-iter", type=int, default=16)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    _common.fresh_kernel_cache()
    cpu = Target.create("cpu")
    print(f"CPU: {cpu.model} ({cpu}); one thread")
    root = Path(tempfile.mkdtemp(prefix="transfer-"))
    source = root / "source"
    one = EvaluatorConfig(num_threads=1)
    t0 = time.time()
    tune_tir([func_of(s) for s in args.source], "cpu", source,
             max_trials_global=args.source_trials * len(args.source), num_trials_per_iter=32,
             seed=100, evaluator=one, progress=False)
    print(f"source database: {args.source} x {args.source_trials} trials in "
          f"{time.time() - t0:.0f} s")
    func = func_of(args.target)
    runs = {"transfer": [], "prior": []}
    for seed in args.seeds:
        for mode in ("prior", "transfer"):  # alternating, so drift hits both alike
            work = root / f"{mode}_{seed}"
            shutil.copytree(source, work)
            strat = EvolutionarySearch(transfer_records=256 if mode == "transfer" else 0)
            t0 = time.time()
            db = tune_tir(func, "cpu", work, max_trials_global=args.trials,
                          num_trials_per_iter=args.per_iter, seed=seed, evaluator=one,
                          strategy=strat, progress=False)
            runs[mode].append({"seed": seed, "curve": curve_of(db, func),
                               "wall_s": time.time() - t0, "transferred": strat.transferred})
            print(f"  seed {seed} {mode}: best {runs[mode][-1]['curve'][-1] * 1e3:.3f} ms, "
                  f"{strat.transferred} records transferred, {time.time() - t0:.0f} s",
                  flush=True)
    best = min(min(r["curve"]) for rs in runs.values() for r in rs)
    checkpoints = [c for c in (8, 16, 32, 64, 128, 256) if c <= args.trials]
    rows = []
    for mode, rs in runs.items():
        row = {"mode": mode, "transferred": statistics.median(r["transferred"] for r in rs),
               "wall_s": statistics.median(r["wall_s"] for r in rs)}
        for c in checkpoints:
            row[f"at{c}"] = statistics.median(best / r["curve"][min(c, len(r["curve"])) - 1]
                                              for r in rs)
        reach = [next((i + 1 for i, b in enumerate(r["curve"]) if b <= best / 0.95), None)
                 for r in rs]
        row["to95"] = (statistics.median(x for x in reach if x) if all(reach) else None)
        rows.append(row)
    cols = [("mode", "model"), ("transferred", "records"), ("wall_s", "wall s", "{:.0f}")]
    cols += [(f"at{c}", f"@{c}", "{:.2f}") for c in checkpoints]
    cols += [("to95", "trials to 95%")]
    _common.print_table(f"{args.target}: best so far / best of all runs (median of "
                        f"{len(args.seeds)} seeds; 1.00 = the best)", rows, cols)
    _common.write_json(args.json, {"benchmark": "transfer", "cpu": cpu.model,
                                   "source": args.source, "target": args.target,
                                   "rows": rows, "runs": runs})
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
