"""The "Auto-Tuning" lesson's AutoTVM search space with only its imports changed: a matmul
template with three-level tiles, unroll and vectorize, tuned by each of AutoTVM's tuners on
a few trials, its best config checked against numpy.

    python examples/seed003_autotvm_search_space.py            # 1024^3, 100 trials a tuner
    python examples/seed003_autotvm_search_space.py --small    # 64^3, a few trials (CI)
"""
import argparse
import tempfile

import numpy as np
import looptune as tvm
from looptune import te
# TVM-style search space definition
from looptune import autotvm


@autotvm.template("seed003_matmul")
def matmul_template(N, M, K):
    A = te.placeholder((N, K), name="A")
    B = te.placeholder((K, M), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k))
    s = te.create_schedule(C.op)
    # Define search space knobs
    cfg = autotvm.get_config()
    # Tile sizes — each is a knob the tuner can adjust
    cfg.define_split("tile_i", N, num_outputs=3)  # 3-level split
    cfg.define_split("tile_j", M, num_outputs=3)
    cfg.define_split("tile_k", K, num_outputs=2)
    cfg.define_knob("unroll_kf", [1, 2, 4, 8])
    cfg.define_knob("vectorize", [4, 8, 16])
    # Apply configuration to schedule
    i, j = s[C].op.axis
    k_axis = s[C].op.reduce_axis[0]
    i_outer, i_mid, i_inner = cfg["tile_i"].apply(s, C, i)
    j_outer, j_mid, j_inner = cfg["tile_j"].apply(s, C, j)
    k_outer, k_inner = cfg["tile_k"].apply(s, C, k_axis)
    s[C].reorder(i_outer, j_outer, k_outer, i_mid, j_mid, k_inner, i_inner, j_inner)
    s[C].vectorize(j_inner)
    s[C].unroll(k_inner)
    s[C].parallel(i_outer)
    return s, [A, B, C]


def main(size=1024, trials=100, tuners=("xgb", "ga", "random")):
    """Tunes with each tuner; returns [(tuner, got, want)] of the best configs."""
    N = M = K = size
    task = autotvm.task.create("seed003_matmul", args=(N, M, K), target="llvm")
    print(task, "-", len(task.config_space), "configs")
    option = autotvm.measure_option(builder="local", runner=autotvm.LocalRunner(number=2))
    out = []
    for name in tuners:
        log = tempfile.mkdtemp(prefix=f"seed003-{name}-")
        tuner = {"xgb": autotvm.tuner.XGBTuner, "ga": autotvm.tuner.GATuner,
                 "random": autotvm.tuner.RandomTuner}[name](task)
        tuner.tune(n_trial=trials, measure_option=option,
                   callbacks=[autotvm.callback.progress_bar(trials, prefix=name),
                              autotvm.callback.log_to_file(log)])
        with autotvm.apply_history_best(log):
            s, args = matmul_template(N, M, K)
        func = tvm.build(s, args, "llvm")
        a = np.random.randn(N, K).astype(np.float32)
        b = np.random.randn(K, M).astype(np.float32)
        c = np.empty((N, M), np.float32)
        func(a, b, c)
        out.append((name, c, a @ b))
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="64^3 and a few trials")
    opts = ap.parse_args()
    for name, got, want in (main(64, 4) if opts.small else main()):
        print(name, "max error vs numpy:", float(np.abs(got - want).max()))
