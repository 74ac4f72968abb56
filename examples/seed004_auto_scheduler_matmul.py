"""TVM's "Optimizing Operators with Auto-scheduling" tutorial (Ansor), with only its imports
changed: a 1024^3 matmul + bias tuned by looptune.auto_scheduler, checked against numpy,
timed, its best schedule printed as Python, and the search resumed from the log.

    python examples/seed004_auto_scheduler_matmul.py            # the tutorial's sizes
    python examples/seed004_auto_scheduler_matmul.py --small    # 64^3, a few trials (CI)

`layout_free_placeholders` is accepted as a hint: a kernel called with the user's arrays
takes B as it is (docs/tvm_names.md). The log is a looptune JSON database: records in
matmul.json, workloads in matmul.json.workloads.
"""
import argparse
import os
import tempfile

import numpy as np
import looptune as tvm
from looptune import te, auto_scheduler


@auto_scheduler.register_workload  # Note the auto_scheduler decorator
def matmul_add(N, L, M, dtype):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    C = te.placeholder((N, M), name="C", dtype=dtype)

    k = te.reduce_axis((0, L), name="k")
    matmul = te.compute(
        (N, M),
        lambda i, j: te.sum(A[i, k] * B[k, j], axis=k),
        name="matmul",
        attrs={"layout_free_placeholders": [B]},  # enable automatic layout transform for tensor B
    )
    out = te.compute((N, M), lambda i, j: matmul[i, j] + C[i, j], name="out")

    return [A, B, C, out]


def resume_search(task, log_file, trials=5):
    print("Resume search:")
    cost_model = auto_scheduler.XGBModel()
    search_policy = auto_scheduler.SketchPolicy(
        task, cost_model, init_search_callbacks=[auto_scheduler.PreloadMeasuredStates(log_file)]
    )
    tune_option = auto_scheduler.TuningOptions(
        num_measure_trials=trials, measure_callbacks=[auto_scheduler.RecordToFile(log_file)]
    )
    task.tune(tune_option, search_policy=search_policy)


def main(size=1024, trials=10, resume_trials=5, min_repeat_ms=500, log_file="matmul.json",
         target="llvm"):
    """Returns (the output the tuned kernel computed, numpy's) for a test to compare."""
    target = tvm.target.Target(target)  # "llvm -mcpu=core-avx2" for AVX2, ...
    N = L = M = size
    task = tvm.auto_scheduler.SearchTask(func=matmul_add, args=(N, L, M, "float32"),
                                         target=target)

    # Inspect the computational graph
    print("Computational DAG:")
    print(task.compute_dag)

    tune_option = auto_scheduler.TuningOptions(
        num_measure_trials=trials,
        measure_callbacks=[auto_scheduler.RecordToFile(log_file)],
        verbose=2,
    )
    # Run auto-tuning (search)
    task.tune(tune_option)
    # Apply the best schedule
    sch, args = task.apply_best(log_file)

    print("Lowered TIR:")
    print(tvm.lower(sch, args, simple_mode=True))

    func = tvm.build(sch, args, target)
    a_np = np.random.uniform(size=(N, L)).astype(np.float32)
    b_np = np.random.uniform(size=(L, M)).astype(np.float32)
    c_np = np.random.uniform(size=(N, M)).astype(np.float32)
    out_np = a_np.dot(b_np) + c_np

    dev = tvm.cpu()
    a_tvm = tvm.nd.array(a_np, device=dev)
    b_tvm = tvm.nd.array(b_np, device=dev)
    c_tvm = tvm.nd.array(c_np, device=dev)
    out_tvm = tvm.nd.empty(out_np.shape, device=dev)
    func(a_tvm, b_tvm, c_tvm, out_tvm)

    # Check results
    np.testing.assert_allclose(out_np, out_tvm.numpy(), rtol=1e-3)

    # Evaluate execution time.
    evaluator = func.time_evaluator(func.entry_name, dev, min_repeat_ms=min_repeat_ms)
    print(
        "Execution time of this operator: %.3f ms"
        % (np.median(evaluator(a_tvm, b_tvm, c_tvm, out_tvm).results) * 1000)
    )

    print("Equivalent python schedule:")
    print(task.print_best(log_file))

    resume_search(task, log_file, resume_trials)
    return out_tvm.numpy(), out_np


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="64^3 and a few trials")
    ap.add_argument("--target", default="llvm", help='e.g. "llvm -mcpu=core-avx2"')
    ap.add_argument("--log", default=None, help="the log file (default: a temp dir's)")
    opts = ap.parse_args()
    log = opts.log or os.path.join(tempfile.mkdtemp(prefix="seed004-"), "matmul.json")
    if opts.small:
        main(64, 4, 2, 10, log, opts.target)
    else:
        main(log_file=log, target=opts.target)
