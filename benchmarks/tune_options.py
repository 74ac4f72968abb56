"""Settings of the tuner compared on one workload: tune under each setting for several seeds,
one thread, then time every best kernel as a user calls it, interleaved with the library
baseline over five rounds (so that the machine's drift falls on all of them alike), and print
baseline / ours for each, with how the trials spread over the design spaces.

    python benchmarks/tune_options.py --workload matmul_add [--isa avx2] [--seeds 0 1]
        [--trials 256] [--options read:all read:vector] [--json out.json]

Settings (OPTIONS): `read:*`, which inputs multi-level tiling copies per tile
(`read_operands`; measured on Zen 4 as AVX2 and natively, docs/figures/read_operands_zen4.json:
the default became ("vector",)); `spaces:*`, how EvolutionarySearch shares each batch among
the design spaces (`space_floor_share`, `space_focus`); `prefetch:*`, whether a row tile
prefetches what the next one reads in place (multi-level tiling's `prefetch`); `kc:*`, the
longest reduction tile inside the register tile (`max_innermost_reduction`).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from tune_kernels import WORKLOADS  # noqa: E402  (first: --isa avx2 holds numpy to AVX2)
import _common  # noqa: E402  (single-threaded BLAS before numpy loads)

import numpy as np  # noqa: E402

from looptune import te  # noqa: E402
from looptune.target import Target  # noqa: E402
from looptune.te.ops import OPS, workload  # noqa: E402
from looptune.te.ops.baseline import baseline  # noqa: E402
from looptune.tune import EvaluatorConfig, TaskScheduler, compile_tir, defaults, tune_tir  # noqa: E402
from looptune.tune.schedule_rule import ScheduleRule  # noqa: E402
from looptune.tune.search_strategy.evolutionary import EvolutionarySearch  # noqa: E402
from looptune.tune.space_generator import PostOrderApply  # noqa: E402

# name -> (multi-level-tiling parameters, EvolutionarySearch parameters), over the defaults
OPTIONS = {
    "read:all": ({"read_operands": ("all",)}, {}),
    "read:vector": ({"read_operands": ("vector",)}, {}),
    "read:all+vector": ({"read_operands": ("all", "vector")}, {}),
    "spaces:shared": ({}, {}),  # the defaults
    "spaces:ranked": ({}, {"space_floor_share": None}),  # the model ranks all spaces at once
    "spaces:even": ({}, {"space_floor_share": 1.0}),
    "prefetch:none": ({"prefetch": ()}, {}),         # no software prefetch
    "prefetch:always": ({"prefetch": (1,)}, {}),     # every row tile prefetches the next one's
    "prefetch:searched": ({"prefetch": (0, 1)}, {}),  # the search decides per candidate
    # the longest reduction tile between two loads and stores of the register tile
    "kc:64": ({"max_innermost_reduction": 64}, {}),
    "kc:128": ({"max_innermost_reduction": 128}, {}),
    "kc:256": ({"max_innermost_reduction": 256}, {}),
    "kc:512": ({"max_innermost_reduction": 512}, {}),
}


def space_with(tiling: dict) -> PostOrderApply:
    """The default CPU rules, multi-level tiling's parameters overridden by `tiling`."""
    return PostOrderApply(sch_rules=[
        ScheduleRule.create(name, **({**opts, **tiling} if name == "multi-level-tiling" else opts))
        for name, opts in defaults.DEFAULT_RULES["cpu"]])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="matmul_add", choices=list(WORKLOADS))
    ap.add_argument("--isa", default="native", choices=["native", "avx2"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--trials", type=int, default=256)
    ap.add_argument("--options", nargs="+", default=["spaces:ranked", "spaces:shared"],
                    choices=list(OPTIONS))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    target = _common.avx2_target() if args.isa == "avx2" else Target.create("cpu")
    print(f"CPU: {target.model} ({target}); one thread")
    op, shape, _, _ = WORKLOADS[args.workload]
    tensors, _, _ = workload(op, **shape)
    func = te.create_prim_func(tensors)
    _common.fresh_kernel_cache()
    mods, spread = {}, {}
    for option in args.options:
        tiling, search = OPTIONS[option]
        for seed in args.seeds:
            t0 = time.time()
            strategy = EvolutionarySearch(**search)
            db = tune_tir(func, target, tempfile.mkdtemp(), max_trials_global=args.trials,
                          seed=seed, evaluator=EvaluatorConfig(num_threads=1), progress=False,
                          task_scheduler=TaskScheduler.create("gradient"), strategy=strategy,
                          space=space_with(tiling))
            mods[(option, seed)] = compile_tir(db, func, target)
            spread[(option, seed)] = [
                (strategy.space_trials[i],
                 strategy.space_best[i] * 1e3 if strategy.space_best[i] < float("inf") else None)
                for i in range(len(strategy.spaces))]
            print(f"  {option} seed {seed}: record "
                  f"{mods[(option, seed)].record.median_secs * 1e3:.4f} ms, "
                  f"{time.time() - t0:.0f} s; trials (best ms) per space: " + ", ".join(
                      f"{n} ({b or float('nan'):.3f})" for n, b in spread[(option, seed)]),
                  flush=True)
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1, 1, t.shape).astype("float32") for t in tensors[:-1]]
    label, lib = baseline(op, inputs, {**OPS[op].defaults, **shape}, threads=1)
    out = np.empty(tensors[-1].shape, "float32")
    timed = _common.interleaved_seconds(
        {**{k: (lambda mod=mod: mod(*inputs, out)) for k, mod in mods.items()}, "lib": lib},
        rounds=5, repeat=5)
    base = timed.pop("lib")
    rows = []
    for (option, seed), ours in timed.items():
        rows.append({"option": option, "seed": seed, "ms": ours * 1e3,
                     "space_trials": [n for n, _ in spread[(option, seed)]],
                     "space_best_ms": [b for _, b in spread[(option, seed)]],
                     "record_ms": mods[(option, seed)].record.median_secs * 1e3,
                     "baseline": label, "baseline_ms": base * 1e3, "vs_baseline": base / ours})
    _common.print_table(f"{args.workload}, {args.trials} trials, {label} {base * 1e3:.4f} ms",
                        rows, [("option", "option"), ("seed", "seed"),
                               ("ms", "ms", "{:.4f}"), ("record_ms", "record ms", "{:.4f}"),
                               ("vs_baseline", "vs baseline", "{:.3f}x")])
    _common.write_json(args.json, {"benchmark": "tune_options", "cpu": _common.cpu_name(),
                                   "isa": str(target), "workload": args.workload,
                                   "trials": args.trials, "rows": rows})


if __name__ == "__main__":
    main()
