"""Tune four kernels with EvolutionarySearch + XGBModel, single-threaded, and compare each
with its library baseline measured in the same run (numpy or torch, one thread). Budgets are
checkpoints of one run: the work dir resumes from 64 to 256 to 512 trials.

The tuned kernel is compiled with compile_tir and timed the way a user calls it: from
Python, with ordinary numpy arrays (numpy's own allocation), in alternation with the library
and with the record's own measurement protocol over 7 rounds (the median of each; a drift of
this shared machine then weighs on all three). Its output is checked against the library's.

Targets (issue 23): matmul_add 1024 >= 1.0x numpy, conv2d (the tutorial's and a stride-2 one)
>= 1.0x torch, depthwise >= 1.5x torch, relu(x@W+b) >= 1.5x numpy, each within 10 minutes of
tuning; a user's call within 10% of the record's time ("gap"); matmul's GFLOP/s as a share of
the core's FMA peak, measured here (_common.fma_peak_gflops). With
--tvm-python, TVM's MetaSchedule tunes the same workloads at the same budgets on one thread
(../shared/peers/tvm_ms_bench.py) and the ratio looptune/TVM is printed (target >= 1.0).

    python benchmarks/tune_kernels.py [--workloads ...] [--trials 64 256 512] [--json out.json]

`--isa avx2` on an AVX-512 machine stands in for an AVX2 one: looptune builds for the host's
ISA without AVX-512 (256-bit vectors, 16 registers), and the baselines are held to AVX2 the
same way (OPENBLAS_CORETYPE=Haswell, the kernel OpenBLAS runs on AVX2 CPUs such as Zen 3;
ONEDNN_MAX_CPU_ISA=AVX2 for torch). Caches and clock stay this machine's.

Where OPENBLAS_CORETYPE is set (some of the development machines set it for old OpenBLAS
builds), numpy runs an older kernel: unset it and OPENBLAS_L2_SIZE for this command
(`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python ...`); the BLAS line shows the kernel.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def _isa_arg() -> str:
    """--isa's value, read before argparse: numpy and torch pick their kernels when they load."""
    for i, a in enumerate(sys.argv):
        if a == "--isa" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if a.startswith("--isa="):
            return a.split("=", 1)[1]
    return "native"


if _isa_arg() == "avx2":
    os.environ["OPENBLAS_CORETYPE"] = "Haswell"
    os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX2"
import _common  # noqa: E402  (single-threaded BLAS before numpy loads)

import numpy as np  # noqa: E402

from looptune import te  # noqa: E402
from looptune.target import Target  # noqa: E402
from looptune.te.ops import OPS, workload  # noqa: E402
from looptune.te.ops.baseline import baseline  # noqa: E402
from looptune.tune import EvaluatorConfig, TaskScheduler, compile_tir, tune_tir  # noqa: E402

PEERS = Path(__file__).resolve().parents[2] / "shared" / "peers" / "tvm_ms_bench.py"

# name -> (operator, shape, TVM peers workload name, target ratio vs the library)
WORKLOADS = {
    "matmul_add": ("matmul_add", dict(M=1024, N=1024, K=1024), "matmul_add1024", 1.0),
    "conv2d": ("conv2d", dict(N=1, C=64, H=56, W=56, K=64, R=3, S=3, stride=1, pad=1),
               "conv2d", 1.0),
    "conv2d_s2": ("conv2d", dict(N=1, C=128, H=28, W=28, K=256, R=3, S=3, stride=2, pad=1),
                  "conv2d_s2", 1.0),
    "depthwise": ("depthwise_conv2d", dict(N=1, C=128, H=56, W=56, R=3, S=3, stride=1, pad=1),
                  "depthwise", 1.5),
    "dense": ("dense", dict(batch=1, in_features=784, out_features=256), "mlp", 1.5),
}


def tune_to(func, trials, work, seed, per_iter, cost_model, target):
    sched = TaskScheduler.create("gradient")
    t0 = time.time()
    db = tune_tir(func, target, work, max_trials_global=trials, num_trials_per_iter=per_iter,
                  seed=seed, cost_model=cost_model, task_scheduler=sched,
                  evaluator=EvaluatorConfig(num_threads=1))
    return db, time.time() - t0, sched.phase_secs


def run_tvm(python: str, name: str, trials: int, out_dir: Path) -> dict | None:
    curve = out_dir / f"tvm_{name}_{trials}.jsonl"
    env = {**os.environ, "LT_THREADS": "1", "TVM_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([python, str(PEERS), name, str(trials), str(curve), "--work-dir",
                           str(out_dir / f"tvm_{name}_{trials}")],
                          capture_output=True, text=True, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    print(f"TVM {name} {trials} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return None


def tvm_result(path: str, name: str, trials: int) -> dict | None:
    """A RESULT of tvm_ms_bench.py run earlier on this machine (one thread), kept as JSON lines
    {"workload": name, "trials": n, "r": {...}}; TVM's tuning is slow, so it may run apart."""
    for line in Path(path).read_text().splitlines():
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            continue
        if d.get("workload") == name and d.get("trials") == trials:
            return d["r"]
    return None


def bench(key: str, trials_list, args, out_dir: Path) -> list:
    op, shape, tvm_name, target = WORKLOADS[key]
    tensors, _, flops = workload(op, **shape)
    func = te.create_prim_func(tensors)
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1, 1, t.shape).astype("float32") for t in tensors[:-1]]
    label, lib = baseline(op, inputs, {**OPS[op].defaults, **shape}, threads=1)
    want = np.asarray(lib())
    work = out_dir / f"looptune_{key}"
    shutil.rmtree(work, ignore_errors=True)
    rows, spent = [], 0.0
    phases_total = {}
    for trials in trials_list:
        db, wall, phases = tune_to(func, trials, work, args.seed, args.per_iter, args.cost_model,
                                   args.target)
        spent += wall
        for k, v in phases.items():
            phases_total[k] = phases_total.get(k, 0.0) + v
        mod = compile_tir(db, func, args.target)   # the record's thread count: 1
        out = np.empty(tensors[-1].shape, "float32")
        mod(*inputs, out)
        np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3 * max(1, np.abs(want).max()))
        # the record's own protocol, now, in the same rounds: apart from the machine's drift
        # since the record was measured, and the luck of the fastest of many noisy candidates
        known = {f.name for f in dataclasses.fields(EvaluatorConfig)}
        c = EvaluatorConfig.from_json({k: v for k, v in mod.record.measure.items() if k in known})
        evaluator = mod.time_evaluator(number=c.number, repeat=c.repeat,
                                       min_repeat_ms=c.min_repeat_ms, arg_offsets=c.arg_offsets,
                                       calls_from=c.calls_from)
        timed = _common.interleaved_seconds(
            {"ours": lambda: mod(*inputs, out), "lib": lib,
             "record": lambda: evaluator(*inputs, out).median},
            rounds=7, repeat=5, min_time=0.2, self_timed=("record",))
        ours, theirs, retimed = timed["ours"], timed["lib"], timed["record"]
        rows.append({"workload": key, "trials": trials, "looptune_ms": ours * 1e3,
                     "record_ms": mod.record.median_secs * 1e3, "baseline": label,
                     "baseline_ms": theirs * 1e3, "vs_baseline": theirs / ours,
                     "gflops": flops / ours / 1e9, "peak_share": flops / ours / 1e9 / args.peak,
                     "gap": ours / mod.record.median_secs - 1, "retimed_ms": retimed * 1e3,
                     "gap_now": ours / retimed - 1, "tuning_wall_s": spent,
                     "s_per_trial": spent / trials,
                     "search_share": phases_total["search"] / sum(phases_total.values()),
                     "target": target})
        print(f"  {key} @ {trials}: {ours * 1e3:.4f} ms (record {mod.record.median_secs * 1e3:.4f}),"
              f" {label} {theirs * 1e3:.4f} ms -> {theirs / ours:.2f}x; {spent:.0f} s tuning",
              flush=True)
    if args.tvm_python or args.tvm_results:
        for r in rows:
            if args.tvm_results:
                t = tvm_result(args.tvm_results, tvm_name, r["trials"])
            else:
                t = run_tvm(args.tvm_python, tvm_name, r["trials"], out_dir)
            if t:
                r["tvm_ms"] = t["best_ms"]
                r["tvm_wall_s"] = t.get("tuning_wall_s")
                r["vs_tvm"] = t["best_ms"] / r["looptune_ms"]
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--trials", type=int, nargs="+", default=[64, 256, 512])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-iter", type=int, default=64)
    ap.add_argument("--cost-model", default="xgb")
    ap.add_argument("--isa", choices=["native", "avx2"], default="native",
                    help="avx2: build AVX2 code and hold the baselines to AVX2 (see above)")
    ap.add_argument("--tvm-python", default=None, help="a Python with apache-tvm installed")
    ap.add_argument("--tvm-results", default=None, help="JSON lines of tvm_ms_bench.py results "
                    "measured apart on this machine (see tvm_result)")
    ap.add_argument("--keep", default=None, help="keep the work dirs here")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    _common.fresh_kernel_cache()  # every trial pays for its compile
    out_dir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="tune-kernels-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    cpu = Target.create("cpu")
    if args.isa == "avx2":
        cpu = _common.avx2_target()
    args.target = cpu
    args.peak = _common.fma_peak_gflops(cpu)
    print(f"CPU: {cpu.model} ({cpu}); one thread for every kernel and baseline; "
          f"BLAS: {_common.blas_info()}; FMA peak {args.peak:.1f} GFLOP/s (one core, measured)")
    rows = []
    for key in args.workloads:
        rows += bench(key, sorted(args.trials), args, out_dir)
    cols = [("workload", "workload"), ("trials", "trials"),
            ("looptune_ms", "looptune ms", "{:.4f}"), ("record_ms", "record ms", "{:.4f}"),
            ("baseline", "baseline"), ("baseline_ms", "baseline ms", "{:.4f}"),
            ("vs_baseline", "vs baseline", "{:.2f}x"), ("target", "target", "{:.1f}x"),
            ("gap", "gap", "{:+.0%}"), ("gap_now", "gap now", "{:+.0%}"),
            ("gflops", "GFLOP/s", "{:.1f}"),
            ("peak_share", "of peak", "{:.0%}"), ("tuning_wall_s", "tuning s", "{:.0f}"),
            ("s_per_trial", "s/trial", "{:.2f}"), ("search_share", "search", "{:.0%}")]
    if args.tvm_python or args.tvm_results:
        cols += [("tvm_ms", "TVM-MS ms", "{:.4f}"), ("vs_tvm", "vs TVM", "{:.2f}x"),
                 ("tvm_wall_s", "TVM s", "{:.0f}")]
    _common.print_table("EvolutionarySearch + XGBModel, single-threaded (ratios > 1: looptune "
                        "is faster)", rows, cols)
    _common.write_json(args.json, {"benchmark": "tune_kernels", "cpu": cpu.model,
                                   "isa": str(cpu), "isa_option": args.isa,
                                   "blas": _common.blas_info(), "fma_peak_gflops": args.peak,
                                   "seed": args.seed, "rows": rows})


if __name__ == "__main__":
    main()
