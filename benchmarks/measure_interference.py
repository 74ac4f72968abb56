"""What a compile on another CPU costs a one-thread measurement (tune/cpu_share.py measures
each candidate while the next ones compile on the other CPUs).

For each workload: tune 32 trials, then time the best kernel on one CPU (pinned), alone and
while gcc compiles looptune-generated C in a loop on another CPU, six alternating rounds;
prints the ratio of the medians (> 1: the measurement is slowed).

    python benchmarks/measure_interference.py [--rounds 6] [--json out.json]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: E402

import numpy as np  # noqa: E402

from looptune import env, te  # noqa: E402
from looptune.backend import Backend  # noqa: E402
from looptune.target import Target  # noqa: E402
from looptune.te.ops import workload  # noqa: E402
from looptune.tune import EvaluatorConfig, compile_tir, tune_tir  # noqa: E402

WORKLOADS = {"matmul 512": ("matmul", dict(M=512, N=512, K=512)),
             "conv2d": ("conv2d", {}),
             "matmul 1024": ("matmul", dict(M=1024, N=1024, K=1024))}


def compile_loop(cpu: int, source: Path) -> subprocess.Popen:
    """gcc -O3 on `source`, again and again, on CPU `cpu` only."""
    cmd = (f"while true; do {env.cc()} -O3 -march=native -fopenmp -fPIC -c {source} "
           f"-o {source.with_suffix('.o')}; done")
    return subprocess.Popen(["bash", "-c", cmd], start_new_session=True,
                            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("needs two CPUs")
    here, other = cpus[-1], cpus[0]
    target = Target.create("cpu")
    print(f"CPU: {target.model} ({target}); measuring on CPU {here}, compiling on CPU {other}")
    # the compile load: a conv2d's generated C (its default schedule), as the tuner compiles
    conv = te.create_prim_func(workload("conv2d")[0])
    source = Path(tempfile.mkdtemp()) / "load.c"
    source.write_text(Backend.for_target(target).generate(conv).text)
    os.sched_setaffinity(0, {here})
    rows = []
    for name, (op, shape) in WORKLOADS.items():
        tensors = workload(op, **shape)[0]
        func = te.create_prim_func(tensors)
        db = tune_tir(func, "cpu", tempfile.mkdtemp(), max_trials_global=32,
                      num_trials_per_iter=32, evaluator=EvaluatorConfig(num_threads=1),
                      progress=False)
        mod = compile_tir(db, func, "cpu")
        rng = np.random.default_rng(0)
        arrays = [rng.uniform(-1, 1, t.shape).astype("float32") for t in tensors[:-1]]
        arrays.append(np.empty(tensors[-1].shape, "float32"))

        def timed():
            return mod.time_evaluator(number=1, repeat=5, min_repeat_ms=20,
                                      calls_from="python")(*arrays).median
        alone, loaded = [], []
        for _ in range(args.rounds):
            alone.append(timed())
            load = compile_loop(other, source)
            time.sleep(0.3)
            loaded.append(timed())
            os.killpg(load.pid, 9)
            load.wait()
            time.sleep(0.2)
        a, b = statistics.median(alone), statistics.median(loaded)
        rows.append({"workload": name, "alone_ms": a * 1e3, "compiling_ms": b * 1e3,
                     "ratio": b / a, "alone_max_ms": max(alone) * 1e3,
                     "compiling_max_ms": max(loaded) * 1e3})
    _common.print_table("one-thread kernel timings, alone and with gcc on another CPU", rows,
                        [("workload", "workload"), ("alone_ms", "alone ms", "{:.3f}"),
                         ("compiling_ms", "compiling ms", "{:.3f}"),
                         ("ratio", "ratio", "{:.3f}"), ("alone_max_ms", "max alone", "{:.3f}"),
                         ("compiling_max_ms", "max compiling", "{:.3f}")])
    _common.write_json(args.json, {"benchmark": "measure_interference",
                                   "cpu": _common.cpu_name(), "rows": rows})


if __name__ == "__main__":
    main()
