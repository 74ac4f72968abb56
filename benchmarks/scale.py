"""Trials per hour on a Ray measurement farm against the local path: the same workload and
the same candidates (replay-trace sampling from one seed, so what is measured does not depend
on the times) tuned (a) with the local builder and runner, one compile at a time, (b) on a
Ray cluster with one worker node and (c) with two, each node 1 CPU for compiles and one
measurement device (`looptune_device`). The Ray head runs the tuner only (no CPUs, no device).
Each configuration compiles into a fresh kernel cache, so every compile is paid for.

Printed: trials per hour, two nodes against one (target: >= 1.7x), and the Ray path's
per-trial overhead against the local path, (b) against (a) (target: <= 10%).

Honest reading: `ray.cluster_utils.Cluster` starts every "node" on this one machine. On a
2-vCPU box the two nodes, the tuner's search and the timings share the same two CPUs, so the
two-node figure is a lower bound for two real machines (and timings taken while the other
node compiles are noisier than on separate boxes). Run it on a quiet machine; say which.

    python benchmarks/scale.py [--trials 192] [--per-iter 16] [--json out.json]

The default 192 trials keeps the start of a cluster's device actors (a second or two, paid
once per run) from passing for per-trial cost: at 64 trials it made the Ray path +18%.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: E402

from looptune import te  # noqa: E402
from looptune.target import Target  # noqa: E402
from looptune.te.ops import workload  # noqa: E402
from looptune.tune import EvaluatorConfig, TaskScheduler, tune_tir  # noqa: E402
from looptune.tune.builder import LocalBuilder  # noqa: E402
from looptune.tune.runner import LocalRunner  # noqa: E402

ROOT = str(Path(__file__).resolve().parent.parent)


def one_run(label: str, func, trials: int, per_iter: int, seed: int, builder, runner,
            fresh_cache: bool = True) -> dict:
    if fresh_cache:
        _common.fresh_kernel_cache()
    sched = TaskScheduler.create("gradient")
    t0 = time.time()
    db = tune_tir(func, "cpu", tempfile.mkdtemp(prefix="scale-"), max_trials_global=trials,
                  num_trials_per_iter=per_iter, seed=seed, strategy="replay-trace",
                  evaluator=EvaluatorConfig(num_threads=1), task_scheduler=sched,
                  builder=builder, runner=runner, progress=False)
    wall = time.time() - t0
    records = [r for r in db.get_all_tuning_records() if not r.baseline]
    return {"config": label, "trials": len(records), "wall_s": wall,
            "trials_per_hour": 3600 * len(records) / wall, "s_per_trial": wall / len(records),
            "ok": sum(r.ok for r in records),
            **{f"{k}_s": v / len(records) for k, v in sched.phase_secs.items()}}


def ray_runs(func, args) -> list:
    import ray
    from ray.cluster_utils import Cluster

    from looptune.tune.builder import RayBuilder
    from looptune.tune.cluster import DEVICE
    from looptune.tune.runner import RayRunner
    node = {"num_cpus": 1, "resources": {DEVICE: 1}, "object_store_memory": 200 * 2**20}
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH"))
                                               if p)
    runs = []
    for n in (1, 2):
        # a new cluster per configuration, its nodes started with a new, empty kernel cache
        # (they inherit this process's environment): the same candidates compiled by an
        # earlier configuration would otherwise be cache hits on the nodes
        _common.fresh_kernel_cache()
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "include_dashboard": False, "object_store_memory": 200 * 2**20})
        try:
            for _ in range(n):
                cluster.add_node(**node)
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, log_to_driver=False)
            runs.append(one_run(f"ray, {n} node{'s' if n > 1 else ''}", func, args.trials,
                                args.per_iter, args.seed, RayBuilder(), RayRunner(),
                                fresh_cache=False))
        finally:
            ray.shutdown()
            cluster.shutdown()
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=192)
    ap.add_argument("--per-iter", type=int, default=16)
    ap.add_argument("--shape", default="M=256,N=256,K=256", help="the matmul's sizes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    shape = {k: int(v) for k, v in (p.split("=") for p in args.shape.split(","))}
    func = te.create_prim_func(workload("matmul", **shape)[0])
    cpu = Target.create("cpu")
    print(f"CPU: {_common.cpu_name()}, {os.cpu_count()} CPUs shared by every node; one thread "
          f"per kernel; matmul {args.shape}, {args.trials} trials")
    runs = [one_run("local", func, args.trials, args.per_iter, args.seed,
                    LocalBuilder(max_workers=1), LocalRunner())] + ray_runs(func, args)
    _common.print_table("Trials per hour (replay-trace, the same candidates in each)", runs, [
        ("config", "config"), ("trials", "trials"), ("trials_per_hour", "trials/h", "{:.0f}"),
        ("s_per_trial", "s/trial", "{:.3f}"), ("search_s", "search", "{:.3f}"),
        ("build_s", "build", "{:.3f}"), ("run_s", "run", "{:.3f}"), ("ok", "ok")])
    local, one, two = runs
    scaling = two["trials_per_hour"] / one["trials_per_hour"]
    overhead = one["s_per_trial"] / local["s_per_trial"] - 1
    print(f"two nodes / one node: {scaling:.2f}x (target >= 1.7x)")
    print(f"Ray per-trial overhead against local: {100 * overhead:+.1f}% (target <= 10%)")
    _common.write_json(args.json, {"benchmark": "scale", "cpu": cpu.model,
                                   "cpus": os.cpu_count(), "args": vars(args), "runs": runs,
                                   "two_over_one": scaling, "ray_overhead": overhead})


if __name__ == "__main__":
    main()
