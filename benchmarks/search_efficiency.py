"""How fast each search finds good kernels: ReplayTrace (random) against EvolutionarySearch
with the xgb, mlp and random cost models, on matmul_add 1024 and conv2d, over several seeds,
single-threaded. Prints best-so-far at 32/64/128/256 trials (median over seeds), trials to
reach 90% of the best any run found, the trials evolutionary + xgb needs to reach
ReplayTrace's final best (target: <= 96 of 256), wall time, and the cost model's Kendall tau
on each batch before it was measured (predicted vs measured order). Writes a PNG of the
curves with --png (matplotlib).

    python benchmarks/search_efficiency.py [--trials 256] [--seeds 0 1 2] [--png curves.png]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: E402

import numpy as np  # noqa: E402

from looptune import te  # noqa: E402
from looptune.target import Target  # noqa: E402
from looptune.te.ops import workload  # noqa: E402
from looptune.tune import EvaluatorConfig, tune_tir  # noqa: E402
from looptune.tune.cost_model import kendall_tau  # noqa: E402
from looptune.tune.search_strategy.evolutionary import EvolutionarySearch  # noqa: E402

WORKLOADS = {"matmul_add 1024": ("matmul_add", dict(M=1024, N=1024, K=1024)),
             "conv2d": ("conv2d", {})}
STRATEGIES = ["replay-trace", "evolutionary+xgb", "evolutionary+mlp", "evolutionary+random"]
CHECKPOINTS = (32, 64, 128, 256)


class TauProbe:
    """A measure callback: before each batch is measured the model scored it; afterwards we
    compare that order with the measured one."""

    def __init__(self, strategy):
        self.strategy = strategy
        self.taus = []

    def __call__(self, task, cands, results):
        model = getattr(self.strategy, "cost_model", None)
        if model is None or not getattr(self.strategy, "last_scores", None):
            return
        secs = [float(np.median(r.run_secs)) if r.ok and not r.aborted_early else np.inf
                for r in results]
        pred = self.strategy.last_scores[:len(secs)]
        ok = [i for i, s in enumerate(secs) if np.isfinite(s)]
        if len(ok) >= 8 and model.num_trained > 0:
            self.taus.append(kendall_tau([pred[i] for i in ok], [secs[i] for i in ok]))


def one_run(func, strategy: str, seed: int, trials: int, per_iter: int) -> dict:
    work = tempfile.mkdtemp(prefix="search-eff-")
    _common.fresh_kernel_cache()  # every trial of every run pays for its compile
    kw = {}
    strat = None
    if strategy == "replay-trace":
        kw["strategy"] = "replay-trace"
    else:
        model = strategy.split("+")[1]
        strat = EvolutionarySearch(cost_model=model)
        kw["strategy"] = strat
    probe = TauProbe(strat) if strat is not None else None
    t0 = time.time()
    db = tune_tir(func, "cpu", work, max_trials_global=trials, num_trials_per_iter=per_iter,
                  seed=seed, evaluator=EvaluatorConfig(num_threads=1), progress=False,
                  measure_callbacks=[probe] if probe else (), **kw)
    wall = time.time() - t0
    recs = sorted(db.get_all_tuning_records(), key=lambda r: r.time)
    best, curve = np.inf, []
    for r in recs:
        best = min(best, r.median_secs)
        curve.append(best)
    return {"curve": curve, "wall_s": wall,
            "tau": statistics.median(probe.taus) if probe and probe.taus else None}


def trials_to(curve, level) -> int | None:
    return next((i + 1 for i, b in enumerate(curve) if b <= level), None)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--strategies", nargs="+", default=STRATEGIES, choices=STRATEGIES)
    ap.add_argument("--trials", type=int, default=256)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--per-iter", type=int, default=32)
    ap.add_argument("--png", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    cpu = Target.create("cpu")
    print(f"CPU: {cpu.model} ({cpu}); one thread")
    runs = {}
    for wname in args.workloads:
        op, shape = WORKLOADS[wname]
        func = te.create_prim_func(workload(op, **shape)[0])
        for strategy in args.strategies:
            for seed in args.seeds:
                r = one_run(func, strategy, seed, args.trials, args.per_iter)
                runs[(wname, strategy, seed)] = r
                print(f"  {wname} {strategy} seed {seed}: best {r['curve'][-1] * 1e3:.3f} ms, "
                      f"{r['wall_s']:.0f} s, tau {r['tau']}", flush=True)
    rows = []
    for wname in args.workloads:
        best_any = min(r["curve"][-1] for (w, _, _), r in runs.items() if w == wname)
        replay_final = [r["curve"][-1] for (w, s, _), r in runs.items()
                        if w == wname and s == "replay-trace"]
        replay_best = statistics.median(replay_final) if replay_final else None
        for strategy in args.strategies:
            rs = [runs[(wname, strategy, s)] for s in args.seeds]
            row = {"workload": wname, "strategy": strategy}
            for c in CHECKPOINTS:
                if c <= args.trials:
                    row[f"best@{c}"] = 1e3 * statistics.median(
                        r["curve"][min(c, len(r["curve"])) - 1] for r in rs)
            t90 = [trials_to(r["curve"], best_any / 0.9) for r in rs]
            row["to_90%"] = statistics.median(t if t else args.trials * 10 for t in t90)
            if replay_best is not None:
                reach = [trials_to(r["curve"], replay_best) for r in rs]
                row["to_replay_best"] = statistics.median(t if t else args.trials * 10
                                                          for t in reach)
            row["wall_s"] = statistics.median(r["wall_s"] for r in rs)
            taus = [r["tau"] for r in rs if r["tau"] is not None]
            row["tau"] = statistics.median(taus) if taus else None
            rows.append(row)
    cols = [("workload", "workload"), ("strategy", "strategy")]
    cols += [(f"best@{c}", f"best@{c} ms", "{:.3f}") for c in CHECKPOINTS if c <= args.trials]
    cols += [("to_90%", "trials to 90%"), ("to_replay_best", "trials to replay's best"),
             ("wall_s", "wall s", "{:.0f}"), ("tau", "Kendall tau", "{:.2f}")]
    _common.print_table(f"search efficiency: medians over seeds {args.seeds} (a value of "
                        f"{args.trials * 10} means never reached)", rows, cols)
    if args.png:
        plot(runs, args, args.png)
    _common.write_json(args.json, {"benchmark": "search_efficiency", "cpu": cpu.model,
                                   "rows": rows,
                                   "curves": {f"{w}|{s}|{seed}": r["curve"]
                                              for (w, s, seed), r in runs.items()}})


def plot(runs, args, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(args.workloads), figsize=(6 * len(args.workloads), 4.5),
                             squeeze=False)
    colors = dict(zip(STRATEGIES, ["tab:gray", "tab:blue", "tab:orange", "tab:green"]))
    for ax, wname in zip(axes[0], args.workloads):
        for strategy in args.strategies:
            curves = [runs[(wname, strategy, s)]["curve"] for s in args.seeds]
            n = min(len(c) for c in curves)
            med = np.median(np.array([c[:n] for c in curves]), axis=0) * 1e3
            ax.plot(np.arange(1, n + 1), med, label=strategy, color=colors[strategy])
            for c in curves:
                ax.plot(np.arange(1, len(c) + 1), np.array(c) * 1e3, color=colors[strategy],
                        alpha=0.2, lw=0.8)
        ax.set_title(f"{wname} (median of {len(args.seeds)} seeds)")
        ax.set_xlabel("trials")
        ax.set_ylabel("best so far (ms, lower is better)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
