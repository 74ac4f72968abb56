"""Tile-size search on a 512x512x512 matmul: random search, a genetic algorithm and hill
climbing over the same template (three-level tiles of i and j, two of k), each for the same
number of trials and seed, measured for real (one thread) against numpy in the same run.
Prints a table and, with matplotlib installed, draws the best-so-far curves.

    python examples/tile_search_matmul.py [--trials 48] [--png curves.png] [--n 512]
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # single-threaded numpy baseline

import numpy as np  # noqa: E402

import looptune as lt  # noqa: E402
from looptune import autotvm, te  # noqa: E402

TUNERS = {"random": "RandomTuner", "ga": "GATuner", "hill-climb": "HillClimbTuner"}


@autotvm.template("example_matmul_tiles")
def matmul_tiles(n):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis(n, name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = lt.Schedule(te.create_prim_func([A, B, C]))
    block = sch.get_block("C")
    i, j, kk = sch.get_loops(block)
    cfg = autotvm.get_config()
    cfg.define_split("tile_i", i, num_outputs=3, max_factor=32)
    cfg.define_split("tile_j", j, num_outputs=3, max_factor=64,
                     filter=lambda s: s[2] % 8 == 0)         # whole 8-lane vectors
    cfg.define_split("tile_k", kk, num_outputs=2, max_factor=256)
    i0, i1, i2 = cfg["tile_i"].apply(sch, i)
    j0, j1, j2 = cfg["tile_j"].apply(sch, j)
    k0, k1 = cfg["tile_k"].apply(sch, kk)
    sch.reorder(i0, j0, k0, i1, j1, k1, i2, j2)
    sch.unroll(i2)
    sch.vectorize(j2)
    return sch, [A, B, C]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=48, help="trials per tuner (default 48)")
    ap.add_argument("--n", type=int, default=512, help="matrix size (default 512)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--png", default=None, help="draw the best-so-far curves here (matplotlib)")
    args = ap.parse_args()

    task = autotvm.task.create("example_matmul_tiles", args=(args.n,), target="cpu")
    print(task)
    print(task.config_space)

    a = np.random.default_rng(0).standard_normal((args.n, args.n), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((args.n, args.n), dtype=np.float32)
    np.dot(a, b)
    t = []
    for _ in range(5):
        t0 = time.perf_counter()
        np.dot(a, b)
        t.append(time.perf_counter() - t0)
    numpy_ms = float(np.median(t)) * 1e3

    curves = {}
    rows = []
    option = autotvm.measure_option(builder="local",
                                    runner=autotvm.LocalRunner(number=1, repeat=3, timeout=10))
    for name, cls in TUNERS.items():
        tuner = getattr(autotvm.tuner, cls)(task, seed=args.seed)
        t0 = time.time()
        tuner.tune(args.trials, option, callbacks=[autotvm.callback.progress_bar(args.trials, name)])
        secs = [s for _, s in tuner.history]
        curves[name] = np.minimum.accumulate(secs) * 1e3
        rows.append((name, tuner.best_secs * 1e3, tuner.best_flops / 1e9, tuner.best_iter + 1,
                     time.time() - t0, tuner.best_config))
    option.close()

    print(f"\nmatmul {args.n}, {args.trials} trials per tuner, seed {args.seed}, one thread, "
          f"on {task.target}")
    print(f"{'tuner':12s} {'best ms':>9s} {'GFLOP/s':>8s} {'vs numpy':>9s} {'found at':>9s} "
          f"{'wall s':>7s}  config")
    for name, ms, gf, at, wall, cfg in rows:
        print(f"{name:12s} {ms:9.3f} {gf:8.1f} {numpy_ms / ms:8.2f}x {at:9d} {wall:7.0f}  {cfg}")
    print(f"{'numpy':12s} {numpy_ms:9.3f} {task.flop / numpy_ms / 1e6:8.1f}")

    if args.png:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib is not installed: no plot (pip install matplotlib)")
            return
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, curve in curves.items():
            ax.plot(np.arange(1, len(curve) + 1), curve, label=name)
        ax.axhline(numpy_ms, color="gray", linestyle="--", label="numpy")
        ax.set_xlabel("trials")
        ax.set_ylabel("best so far (ms)")
        ax.set_yscale("log")
        ax.set_title(f"tile-size search, matmul {args.n}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
