"""A conv2d template in the AutoTVM style: tile knobs for a register tile, unroll and
vectorize knobs for it, and a compute_at knob for the padding stage. Tunes it with XGBTuner (or
another tuner), checks the best config against numpy, and times it against the untuned
kernel, single-threaded.

    python examples/conv2d_template.py [--trials 48] [--tuner xgb] [--log conv2d.log]
"""
from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

import looptune as lt
from looptune import autotvm, te

SHAPE = dict(N=1, C=32, H=28, W=28, K=64, R=3, S=3, pad=1)


@autotvm.template("example_conv2d_nchw")
def conv2d_template(N, C, H, W, K, R, S, pad):
    X = te.placeholder((N, C, H, W), name="X")
    Wt = te.placeholder((K, C, R, S), name="W")
    out = te.ops.conv2d_nchw(X, Wt, padding=pad)
    sch = lt.Schedule(te.create_prim_func([X, Wt, out]))
    conv = sch.get_block("conv2d_nchw")
    padding = sch.get_producers(conv)[0]
    n, k, y, x, rc, rr, rs = sch.get_loops(conv)

    cfg = autotvm.get_config()
    # tiles: output channels, rows, columns (the inner one is the vector) and input channels
    cfg.define_split("tile_k", k, num_outputs=2, max_factor=16)
    cfg.define_split("tile_y", y, num_outputs=2, max_factor=4)
    cfg.define_split("tile_x", x, num_outputs=2, policy="verbose", max_factor=32)
    cfg.define_split("tile_rc", rc, num_outputs=2, max_factor=16)
    ko, ki = cfg["tile_k"].apply(sch, k)
    yo, yi = cfg["tile_y"].apply(sch, y)
    xo, xi = cfg["tile_x"].apply(sch, x)
    rco, rci = cfg["tile_rc"].apply(sch, rc)
    sch.reorder(n, ko, yo, xo, rco, rr, rs, rci, ki, yi, xi)
    # unroll / vectorize the register tile
    cfg.define_annotate("ann_tile", [ki, yi, xi], policy="try_unroll_vec")
    cfg["ann_tile"].apply(sch, [ki, yi, xi])
    cfg.define_knob("auto_unroll_max_step", [0, 16, 64])
    sch.annotate(conv, "pragma_auto_unroll_max_step", cfg["auto_unroll_max_step"].apply(sch))
    # where the zero padding is computed: inlined into the convolution, once for the whole
    # image, or per tile of output channels / rows
    cfg.define_knob("pad_at", ["inline", "root", "ko", "yo"])
    where = cfg["pad_at"].val
    if where == "inline":
        sch.compute_inline(padding)
    elif where != "root":
        sch.compute_at(padding, {"ko": ko, "yo": yo}[where])
    return sch, [X, Wt, out]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=48, help="configs to measure (default 48)")
    ap.add_argument("--tuner", default="xgb",
                    help="gridsearch, random, ga, sa, hill-climb or xgb (default)")
    ap.add_argument("--log", default=None, help="keep the records here (default: a temp dir)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    log = args.log or tempfile.mkdtemp(prefix="conv2d-log-")

    shape = tuple(SHAPE.values())
    task = autotvm.task.create("example_conv2d_nchw", args=shape, target="cpu")
    print(task)
    print(task.config_space)

    tuner = autotvm.tuner.Tuner.create(args.tuner, task, seed=args.seed)
    option = autotvm.measure_option(builder="local",
                                    runner=autotvm.LocalRunner(number=2, repeat=3, timeout=10))
    t0 = time.time()
    tuner.tune(args.trials, option, callbacks=[autotvm.callback.progress_bar(args.trials),
                                               autotvm.callback.log_to_file(log)])
    print(f"tuned {args.trials} configs in {time.time() - t0:.0f} s; records in {log}")
    if tuner.best_config is None:
        print("no config ran successfully")
        return
    print(f"best: {tuner.best_config}")

    with autotvm.apply_history_best(log):
        sch, _ = conv2d_template(*shape)
    print("\n== the best config's schedule ==")
    print(sch.trace.as_python())

    mod = lt.build(sch, num_threads=1)
    untuned = lt.build(task.func, num_threads=1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((SHAPE["N"], SHAPE["C"], SHAPE["H"], SHAPE["W"]), dtype=np.float32)
    w = rng.standard_normal((SHAPE["K"], SHAPE["C"], SHAPE["R"], SHAPE["S"]), dtype=np.float32)
    out = np.zeros((SHAPE["N"], SHAPE["K"], SHAPE["H"], SHAPE["W"]), np.float32)
    mod(x, w, out)
    p = SHAPE["pad"]
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    ref = np.zeros_like(out)
    for r in range(SHAPE["R"]):
        for s in range(SHAPE["S"]):
            ref += np.einsum("nchw,kc->nkhw", xp[:, :, r:r + SHAPE["H"], s:s + SHAPE["W"]],
                             w[:, :, r, s])
    print(f"\nmax |error| against numpy: {np.abs(out - ref).max():.2e}")
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)

    def median_ms(m):
        return m.time_evaluator(number=2, repeat=5, min_repeat_ms=20)(x, w, out).median * 1e3
    tuned_ms, untuned_ms = median_ms(mod), median_ms(untuned)
    gflops = task.flop / tuned_ms / 1e6
    print(f"tuned {tuned_ms:.3f} ms ({gflops:.1f} GFLOP/s), untuned {untuned_ms:.3f} ms: "
          f"{untuned_ms / tuned_ms:.1f}x faster (one thread, {task.target})")


if __name__ == "__main__":
    main()
