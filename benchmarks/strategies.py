"""Which search strategy finds a good config fastest? Issue 10's comparison on one real space.

1. Sweep: a conv2d template (1x32x28x28, 64 filters 3x3, pad 1; four tile knobs and an
   unroll knob, 1,350 configs) is measured exhaustively on this machine, single-threaded, once, into
   `--sweep-dir` (run it again and the stored records are reused; nothing is re-measured).
2. Simulation: grid search, random, GA, simulated annealing, hill climbing and XGB tune the
   same space over `--seeds` seeds each, every measurement answered from the sweep's table
   (a config the sweep did not measure is an error: no time is invented). For each strategy
   it prints the trials needed to reach 90/95/99% of the true optimum's throughput (median and
   interquartile range over seeds) and writes the median best-so-far curves as a PNG.
   One seed of each strategy also runs through `SimulatedRunner` (the full measurement path,
   answered from the same table) as a check that both paths agree.

Target (issue 10): XGB reaches 90% of the optimum in fewer trials (median) than every
model-free strategy.

    python benchmarks/strategies.py [--sweep-dir DIR] [--seeds 20] [--trials 400]
        [--json out.json] [--png out.png]
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import looptune as lt
from looptune import autotvm, te
from looptune.template.measure import MeasureResult
from looptune.template.space import config_of_trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_name, write_json  # noqa: E402

SHAPE = (1, 32, 28, 28, 64, 3, 3, 1)   # N, C, H, W, K, R, S, pad
TUNERS = ("gridsearch", "random", "ga", "sa", "hill-climb", "xgb")
MODEL_FREE = ("gridsearch", "random", "ga", "sa", "hill-climb")
FRACTIONS = (0.90, 0.95, 0.99)


@autotvm.template("bench_conv2d_nchw")
def conv2d_template(N, C, H, W, K, R, S, pad):
    X = te.placeholder((N, C, H, W), name="X")
    Wt = te.placeholder((K, C, R, S), name="W")
    out = te.ops.conv2d_nchw(X, Wt, padding=pad)
    sch = lt.Schedule(te.create_prim_func([X, Wt, out]))
    conv = sch.get_block("conv2d_nchw")   # the zero padding stays a stage of its own
    n, k, y, x, rc, rr, rs = sch.get_loops(conv)
    cfg = autotvm.get_config()
    cfg.define_split("tile_k", k, num_outputs=2, max_factor=16)     # 5 choices
    cfg.define_split("tile_y", y, num_outputs=2, max_factor=4)      # 3
    cfg.define_split("tile_x", x, num_outputs=2, max_factor=32)     # 6
    cfg.define_split("tile_rc", rc, num_outputs=2, max_factor=16)   # 5
    ko, ki = cfg["tile_k"].apply(sch, k)
    yo, yi = cfg["tile_y"].apply(sch, y)
    xo, xi = cfg["tile_x"].apply(sch, x)
    rco, rci = cfg["tile_rc"].apply(sch, rc)
    sch.reorder(n, ko, yo, xo, rco, rr, rs, rci, ki, yi, xi)
    sch.vectorize(xi)
    cfg.define_knob("auto_unroll_max_step", [0, 16, 64])           # 3
    sch.annotate(conv, "pragma_auto_unroll_max_step", cfg["auto_unroll_max_step"].apply(sch))
    return sch, [X, Wt, out]


def sweep(task, sweep_dir: Path) -> dict:
    """config index -> median seconds (inf: failed) for every config, measuring those the
    sweep directory does not hold yet."""
    table = load_table(task, sweep_dir)
    todo = [i for i in range(len(task.config_space)) if i not in table]
    if todo:
        print(f"sweep: measuring {len(todo)} of {len(task.config_space)} configs into "
              f"{sweep_dir} (single-threaded)")
        tuner = autotvm.tuner.GridSearchTuner(task)
        tuner.visited.update(table)  # stored configs are not measured again
        option = autotvm.measure_option(
            builder="local", runner=autotvm.LocalRunner(number=2, repeat=3, timeout=10))
        t0 = time.time()
        tuner.tune(len(todo), option, callbacks=[autotvm.callback.progress_bar(len(todo)),
                                                 autotvm.callback.log_to_file(sweep_dir)])
        print(f"sweep: {len(todo)} configs in {time.time() - t0:.0f} s")
        table = load_table(task, sweep_dir)
    missing = len(task.config_space) - len(table)
    if missing:
        raise SystemExit(f"the sweep in {sweep_dir} lacks {missing} configs; run again")
    return table


def load_table(task, sweep_dir: Path) -> dict:
    if not sweep_dir.exists():
        return {}
    from looptune.tune.database.work_dir import open_work_dir
    db = open_work_dir(sweep_dir)
    table = {}
    for rec in db.get_all_tuning_records():
        if rec.workload.key != task.workload.key:
            continue
        cfg = config_of_trace(task.config_space, rec.trace)
        if cfg is not None:
            table[cfg.index] = rec.median_secs  # a failed record: inf
    return table


def from_table(table: dict):
    """A measure function answering from the sweep (never inventing a time)."""
    def measure(inputs):
        out = []
        for inp in inputs:
            secs = table[inp.config.index]  # KeyError: not measured; cannot happen after sweep
            out.append(MeasureResult(costs=(secs,)) if math.isfinite(secs)
                       else MeasureResult(error_class="run_error", error_msg="failed in the sweep"))
        return out
    return measure


def trials_to(history: list, best: float, fraction: float):
    """The first trial (1-based) whose best-so-far throughput is >= fraction of the optimum."""
    cur = math.inf
    for i, (_, secs) in enumerate(history, 1):
        cur = min(cur, secs)
        if cur <= best / fraction:
            return i
    return None


def curve(history: list, n: int) -> np.ndarray:
    best = np.minimum.accumulate([s for _, s in history] + [math.inf] * (n - len(history)))
    return best[:n]


def show(v: float, cap: int) -> str:
    return f">{cap}" if v > cap else f"{v:.0f}"


def quartiles(values: list, cap: int):
    """(median, q1, q3) of trials, a strategy that never got there counting as cap + 1."""
    v = np.array([cap + 1 if x is None else x for x in values], dtype=float)
    return float(np.median(v)), float(np.percentile(v, 25)), float(np.percentile(v, 75))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep-dir", default="strategies-sweep")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=400, help="trials per tuning run")
    ap.add_argument("--tuners", nargs="+", default=list(TUNERS), choices=TUNERS)
    ap.add_argument("--json", default=None)
    ap.add_argument("--png", default=None)
    args = ap.parse_args()

    task = autotvm.task.create("bench_conv2d_nchw", args=SHAPE, target="cpu")
    print(f"CPU: {cpu_name()}; space: {len(task.config_space)} configs")
    table = sweep(task, Path(args.sweep_dir))
    ok = {i: s for i, s in table.items() if math.isfinite(s)}
    best_i = min(ok, key=ok.get)
    best = ok[best_i]
    gflops = task.flop / best / 1e9
    print(f"optimum: config {best_i} {task.config_space.get(best_i)}: {best * 1e3:.4f} ms "
          f"({gflops:.1f} GFLOP/s); median config {statistics.median(ok.values()) * 1e3:.4f} ms; "
          f"{len(table) - len(ok)} failed")
    near = {f: sum(s <= best / f for s in ok.values()) for f in FRACTIONS}
    print("configs within " + ", ".join(f"{f:.0%}: {n}" for f, n in near.items()))

    measure = from_table(table)
    rows, curves = {}, {}
    t0 = time.time()
    for name in args.tuners:
        runs = []
        for seed in range(args.seeds):
            tuner = autotvm.tuner.Tuner.create(name, task, seed=seed)
            tuner.tune(args.trials, measure)
            runs.append(tuner.history)
        rows[name] = {f"{f:.0%}": [trials_to(h, best, f) for h in runs] for f in FRACTIONS}
        curves[name] = np.median([curve(h, args.trials) for h in runs], axis=0)
    sim_secs = time.time() - t0

    # the full path once per strategy: SimulatedRunner behind measure_option, same answers
    from looptune.tune.runner.simulated import SimulatedRunner
    from looptune.tune.database.work_dir import open_work_dir
    sim = SimulatedRunner(open_work_dir(Path(args.sweep_dir)))
    agree = {}
    for name in args.tuners:  # every answer through the full path is the table's time
        b = autotvm.tuner.Tuner.create(name, task, seed=0)
        b.tune(min(args.trials, 64), autotvm.measure_option(runner=sim))
        agree[name] = all(secs == table[i] or math.isclose(secs, table[i])
                          for i, secs in b.history)
    print(f"\ntrials to reach a fraction of the optimum's throughput, {args.seeds} seeds "
          f"x {args.trials} trials per strategy (median [q1-q3]; > {args.trials}: not reached); "
          f"simulated in {sim_secs:.0f} s")
    print(f"{'strategy':12s}" + "".join(f"{f'to {f:.0%}':>22s}" for f in FRACTIONS)
          + f"{'reached 90%':>13s}{'SimulatedRunner agrees':>24s}")
    summary = {}
    for name in args.tuners:
        cells, s = [], {}
        for f in FRACTIONS:
            med, q1, q3 = quartiles(rows[name][f"{f:.0%}"], args.trials)
            s[f"{f:.0%}"] = {"median": med, "q1": q1, "q3": q3}
            cells.append(f"{show(med, args.trials)} [{show(q1, args.trials)}-{show(q3, args.trials)}]")
        reached = sum(v is not None for v in rows[name]["90%"])
        s["reached_90"] = reached
        summary[name] = s
        print(f"{name:12s}" + "".join(f"{c:>22s}" for c in cells)
              + f"{f'{reached}/{args.seeds}':>13s}{str(agree[name]):>24s}")
    if "xgb" in summary:
        xgb = summary["xgb"]["90%"]["median"]
        others = {n: summary[n]["90%"]["median"] for n in MODEL_FREE if n in summary}
        met = all(xgb < v for v in others.values())
        print(f"\ntarget: xgb reaches 90% in fewer trials (median {xgb:.0f}) than every model-free "
              f"strategy ({', '.join(f'{n} {v:.0f}' for n, v in others.items())}): "
              f"{'met' if met else 'NOT met'}")

    if args.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 4.5))
        x = np.arange(1, args.trials + 1)
        for name in args.tuners:
            ax.plot(x, task.flop / curves[name] / 1e9, label=name)
        ax.axhline(gflops, color="k", ls=":", lw=1, label="optimum")
        ax.axhline(0.9 * gflops, color="grey", ls="--", lw=0.8, label="90% of optimum")
        ax.set_xscale("log")
        ax.set_xlabel("trials")
        ax.set_ylabel("best-so-far GFLOP/s (median over seeds)")
        ax.set_title(f"conv2d template, {len(table)} configs, {args.seeds} seeds (simulated)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.png, dpi=110)
        print(f"wrote {args.png}")
    write_json(args.json, {
        "benchmark": "strategies", "cpu": cpu_name(), "space": len(table),
        "optimum_ms": best * 1e3, "optimum_config": best_i, "seeds": args.seeds,
        "trials": args.trials, "summary": summary, "trials_to": rows,
        "simulated_runner_agrees": agree})


if __name__ == "__main__":
    main()
