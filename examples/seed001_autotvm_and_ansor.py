"""The "AutoTVM & AutoScheduler (Ansor)" lesson with only its imports changed: a matmul
template with knobs tuned by AutoTVM's XGBTuner, then the same matmul tuned template-free by
Ansor, both checked against numpy. (The lesson's model-level part - relay, extract_tasks,
TaskScheduler - is looptune's model API instead: docs/tvm_names.md.)

    python examples/seed001_autotvm_and_ansor.py            # 1024^3, 200 + 1000 trials
    python examples/seed001_autotvm_and_ansor.py --small    # 64^3, a few trials (CI)
"""
import argparse
import os
import tempfile

import looptune as tvm
from looptune import te, autotvm
import numpy as np
from looptune import auto_scheduler


# Define a tunable matrix multiplication
@autotvm.template("matmul")
def matmul_template(N, L, M, dtype="float32"):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")

    s = te.create_schedule(C.op)

    # ---- ConfigSpace: define tunable knobs ----
    cfg = autotvm.get_config()

    # Tile sizes for the output axes
    cfg.define_split("tile_y", N, num_outputs=2)    # splits i
    cfg.define_split("tile_x", M, num_outputs=2)    # splits j
    cfg.define_split("tile_k", L, num_outputs=2)    # splits k

    # Apply the splits
    yo, yi = cfg["tile_y"].apply(s, C, C.op.axis[0])
    xo, xi = cfg["tile_x"].apply(s, C, C.op.axis[1])
    ko, ki = cfg["tile_k"].apply(s, C, k)

    # Reorder: outer loops → reduction → inner compute
    s[C].reorder(yo, xo, ko, yi, ki, xi)

    # Optional: unroll inner loops
    cfg.define_knob("auto_unroll_max_step", [0, 64, 512, 1024])
    s[C].pragma(yo, "auto_unroll_max_step", cfg["auto_unroll_max_step"].val)

    return s, [A, B, C]


# Step 1: Define the computation (no template!)
@auto_scheduler.register_workload
def matmul_ansor(N, L, M, dtype="float32"):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def check(sch, args, target, N, L, M):
    """The tuned kernel against numpy on random inputs; returns (got, want)."""
    func = tvm.build(sch, args, target)
    a = np.random.uniform(-1, 1, (N, L)).astype("float32")
    b = np.random.uniform(-1, 1, (L, M)).astype("float32")
    c = tvm.nd.empty((N, M), "float32")
    func(tvm.nd.array(a), tvm.nd.array(b), c)
    return c.numpy(), a @ b


def main(size=1024, autotvm_trials=200, ansor_trials=1000, work=".", target="llvm -mcpu=core-avx2"):
    # Define the task
    N, L, M = size, size, size
    task = autotvm.task.create("matmul", args=(N, L, M, "float32"), target=target)

    print(f"ConfigSpace size: {len(task.config_space)}")

    # Configure the tuner
    measure_option = autotvm.measure_option(
        builder="local",
        runner=autotvm.LocalRunner(number=5, repeat=3, timeout=10),
    )

    # XGBoost cost model + simulated annealing search
    tuner = autotvm.tuner.XGBTuner(task, feature_type="curve")

    log = os.path.join(work, "matmul_autotvm.json")
    tuner.tune(
        n_trial=autotvm_trials,
        measure_option=measure_option,
        callbacks=[
            autotvm.callback.progress_bar(autotvm_trials),
            autotvm.callback.log_to_file(log),
        ],
    )
    with autotvm.apply_history_best(log, target=target):
        s, args = matmul_template(N, L, M)
    results = [check(s, args, target, N, L, M)]

    # Step 2: Create task
    target = tvm.target.Target(target)
    task = auto_scheduler.SearchTask(
        func=matmul_ansor, args=(N, L, M, "float32"), target=target
    )

    print(f"Compute DAG:\n{task.compute_dag}")

    # Step 3: Configure tuning
    log = os.path.join(work, "matmul_ansor.json")
    tune_option = auto_scheduler.TuningOptions(
        num_measure_trials=ansor_trials,
        measure_callbacks=[auto_scheduler.RecordToFile(log)],
        verbose=2,
    )

    # Step 4: Run search
    task.tune(tune_option)

    # Step 5: Apply best schedule
    sch, args = task.apply_best(log)
    print(tvm.lower(sch, args, simple_mode=True))
    results.append(check(sch, args, target, N, L, M))
    return results


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="64^3 and a few trials")
    ap.add_argument("--target", default="llvm -mcpu=core-avx2")
    opts = ap.parse_args()
    work = tempfile.mkdtemp(prefix="seed001-")
    if opts.small:
        main(64, 6, 4, work, opts.target)
    else:
        main(work=work, target=opts.target)
