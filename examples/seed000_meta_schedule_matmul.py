"""The "MetaSchedule" lesson with its imports changed: a schedule's trace printed, the default
rules spelled out, a matmul tuned by tune_tir, its best record read back from the database
(get_top_k, as_schedule) and compiled (compile_tir, checked against numpy).

One change beyond the imports: the lesson writes the matmul in TVMScript (@T.prim_func),
which looptune does not parse; it is the same function written as tensor expressions
(te.create_prim_func gives blocks and loops of the same shape). The lesson's model-level part
(relay tune_relay / compile_relay) is looptune's model API: docs/tvm_names.md.

    python examples/seed000_meta_schedule_matmul.py            # 1024^3, 500 trials
    python examples/seed000_meta_schedule_matmul.py --small    # 64^3, a few trials (CI)
"""
import argparse
import tempfile

import numpy as np
import looptune as tvm
from looptune import te, tir
from looptune import meta_schedule as ms
from looptune.meta_schedule import schedule_rule


def matmul_func(n):
    """C[i, j] += A[i, k] * B[k, j] over n x n float32 matrices, block "C"."""
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def main(n=1024, trials=500, per_iter=64, work_dir="./tune_matmul",
         target="llvm -mcpu=core-avx2"):
    """Returns (the tuned kernel's output, numpy's) on random inputs."""
    matmul = matmul_func(n)
    # Create a schedule from the PrimFunc
    sch = tir.Schedule(matmul)
    # Apply primitives — each call is recorded in the trace
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    # Tile the i-axis
    io, ii = sch.split(i, factors=[n // 32, 32])
    # Tile the j-axis
    jo, ji = sch.split(j, factors=[n // 32, 32])
    # Tile the k-axis
    ko, ki = sch.split(k, factors=[n // 16, 16])
    # Reorder
    sch.reorder(io, jo, ko, ii, ki, ji)
    # Print the trace — the recorded sequence of decisions
    print(sch.trace)

    # Common rules shipped with TVM:
    rules = [
        schedule_rule.AutoInline(  # inline trivial computations
            into_producer=False,
            into_consumer=True,
        ),
        schedule_rule.MultiLevelTiling(  # the workhorse: multi-level tiling
            structure="SSRSRS",  # Spatial-Spatial-Reduce-Spatial-Reduce-Spatial
            tile_binds=None,  # for GPU: ["blockIdx.x", "threadIdx.x"]
            max_innermost_factor=64,
            vector_load_lens=None,
            reuse_read=None,
            reuse_write=None,
        ),
        schedule_rule.ParallelizeVectorizeUnroll(
            max_jobs_per_core=16,
            max_vectorize_extent=32,
            unroll_max_steps=[0, 16, 64, 512],
            unroll_explicit=True,
        ),
    ]

    # Tune a single PrimFunc with these rules
    database = ms.tune_tir(
        mod=tvm.IRModule({"main": matmul}),
        target=target,
        max_trials_global=trials,
        num_trials_per_iter=per_iter,
        work_dir=work_dir,
        space=ms.space_generator.PostOrderApply(sch_rules=rules),
    )
    # Retrieve the best schedule
    workload = database.commit_workload(tvm.IRModule({"main": matmul}))
    top_record = database.get_top_k(workload, top_k=1)[0]
    best_sch = top_record.as_schedule()
    print(best_sch.mod.script())

    # Re-use previous tuning results
    database = ms.database.JSONDatabase(
        path_workload=f"{work_dir}/database_workload.json",
        path_tuning_record=f"{work_dir}/database_tuning_record.json",
    )
    # Check what's cached
    workloads = database.get_all_tuning_records()
    print(f"Database has {len(workloads)} tuning records")
    lib = ms.compile_tir(database, tvm.IRModule({"main": matmul}), target)
    a = np.random.uniform(-1, 1, (n, n)).astype("float32")
    b = np.random.uniform(-1, 1, (n, n)).astype("float32")
    c = np.empty((n, n), "float32")
    lib(a, b, c)
    return c, a @ b


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="64^3 and a few trials")
    ap.add_argument("--target", default="llvm -mcpu=core-avx2")
    opts = ap.parse_args()
    work = tempfile.mkdtemp(prefix="seed000-")
    got, want = (main(64, 4, 4, work, opts.target) if opts.small
                 else main(work_dir=work, target=opts.target))
    print("max error vs numpy:", float(np.abs(got - want).max()))
