"""What software prefetch (codegen/passes/prefetch.py) does to the same kernels: tune a
workload with the defaults, take the fastest distinct candidates, build each with every
annotated row-tile loop set to prefetch 0 (none) and 1 tile ahead, and time the two builds of
each candidate in alternation over several rounds, called as a user calls them (one thread,
the same numpy arrays). Prints, per candidate, the median of the per-round ratios
prefetch / none; pairing the builds of one candidate keeps the machine's drift out of it.

    python benchmarks/prefetch_effect.py [--workloads matmul_add conv2d] [--isa avx2]
        [--trials 128] [--top 8] [--rounds 7] [--json out.json]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from tune_kernels import WORKLOADS  # noqa: E402  (first: --isa avx2 holds numpy to AVX2)
import _common  # noqa: E402

import numpy as np  # noqa: E402

from looptune import te  # noqa: E402
from looptune.backend import Backend  # noqa: E402
from looptune.codegen.passes.prefetch import PREFETCH  # noqa: E402
from looptune.schedule import Schedule  # noqa: E402
from looptune.target import Target  # noqa: E402
from looptune.te.ops import workload  # noqa: E402
from looptune.tir.functor import map_children  # noqa: E402
from looptune.tir.stmt import For, with_annotation  # noqa: E402
from looptune.tune import EvaluatorConfig, tune_tir  # noqa: E402


def with_prefetch(func, ahead: int):
    """`func` with every loop annotated for prefetch set to `ahead` (None: unchanged)."""
    found = [False]

    def walk(s):
        if not isinstance(s, For):
            return map_children(s, walk)
        ann = s.annotations
        if s.annotation(PREFETCH) is not None:
            found[0] = True
            ann = with_annotation(ann, PREFETCH, ahead)
        return For(s.loop_var, s.extent, s.kind, walk(s.body), s.thread, ann)

    out = func.with_body(walk(func.body))
    return out if found[0] else None


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="+", default=["matmul_add", "conv2d"],
                    choices=list(WORKLOADS))
    ap.add_argument("--trials", type=int, default=128)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--isa", choices=["native", "avx2"], default="native")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    target = _common.avx2_target() if args.isa == "avx2" else Target.create("cpu")
    backend = Backend.for_target(target)
    _common.fresh_kernel_cache()
    print(f"CPU: {_common.cpu_name()}; building for {target}; one thread")
    rows = []
    for key in args.workloads:
        op, shape, *_ = WORKLOADS[key]
        tensors = workload(op, **shape)[0]
        func = te.create_prim_func(tensors)
        t0 = time.time()
        db = tune_tir(func, target, tempfile.mkdtemp(prefix="prefetch-effect-"),
                      max_trials_global=args.trials, num_trials_per_iter=64, seed=args.seed,
                      evaluator=EvaluatorConfig(num_threads=1), progress=False)
        print(f"{key}: tuned {args.trials} trials in {time.time() - t0:.0f} s")
        records = sorted((r for r in db.get_all_tuning_records() if r.ok),
                         key=lambda r: r.median_secs)
        rng = np.random.default_rng(0)
        arrays = [rng.uniform(-1, 1, t.shape).astype("float32") for t in tensors]
        seen, picked = set(), []
        for rec in records:
            sch = Schedule(func)
            rec.trace.apply_to_schedule(sch, remove_postproc=False)
            pair = [with_prefetch(sch.func, d) for d in (0, 1)]
            if pair[0] is None:
                continue
            h = pair[0].structural_hash()
            if h in seen:
                continue
            seen.add(h)
            mods = [backend.build(f) for f in pair]
            if "__builtin_prefetch" not in mods[1].source:
                continue  # nothing to prefetch in this one (its row tile loop is gone)
            for m in mods:
                m.set_num_threads(1)
            picked.append((rec, mods))
            if len(picked) == args.top:
                break
        for rank, (rec, (none, ahead)) in enumerate(picked):
            ratios, t_none, t_ahead = [], [], []
            for _ in range(args.rounds):
                a = _common.median_seconds(lambda: none(*arrays), repeat=5, min_time=0.05)
                b = _common.median_seconds(lambda: ahead(*arrays), repeat=5, min_time=0.05)
                t_none.append(a)
                t_ahead.append(b)
                ratios.append(b / a)
            row = {"workload": key, "rank": rank, "record_ms": rec.median_secs * 1e3,
                   "none_ms": statistics.median(t_none) * 1e3,
                   "prefetch_ms": statistics.median(t_ahead) * 1e3,
                   "ratio": statistics.median(ratios), "ratios": ratios}
            print(f"  #{rank}: record {row['record_ms']:.3f} ms, none {row['none_ms']:.3f}, "
                  f"prefetch {row['prefetch_ms']:.3f}: {row['ratio']:.3f}", flush=True)
            rows.append(row)
        mine = [r["ratio"] for r in rows if r["workload"] == key]
        if mine:
            print(f"{key}: prefetch / none, median over {len(mine)} candidates "
                  f"{statistics.median(mine):.3f} (range {min(mine):.3f}-{max(mine):.3f})")
    _common.write_json(args.json, {"benchmark": "prefetch_effect", "cpu": _common.cpu_name(),
                                   "isa": str(target), "trials": args.trials, "rows": rows})


if __name__ == "__main__":
    main()
