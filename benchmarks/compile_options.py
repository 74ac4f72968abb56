"""Which C compiler and flags give the best kernels per minute of tuning (issue 23, "measure
options before choosing")? Tune a workload for --trials trials with the defaults, then build
every candidate the search measured again under each compiler/flag set and time each kernel
(one thread, as the records were). The first set is looptune's
own and is listed twice: the second copy shows how far two timings of the same kernels
differ. Prints, per set: the compile seconds of all candidates (one
at a time, so the sum is core-seconds), the median kernel time against the first set's for the
same candidate, and the best kernel of the set. A set is better for tuning only if it saves
more compile time than its kernels lose.

    python benchmarks/compile_options.py [--workloads conv2d "matmul 512"] [--trials 64]
        [--sets "gcc -O3" "gcc -O2" ...] [--isa avx2] [--json out.json]

A set is "<compiler> <flags>": the compiler is gcc or clang, the flags replace the
optimization level of looptune's own (-O3 and the rest of runtime.compiler.CFLAGS, with the
Target's ISA flags). A set may tune for another CPU (`gcc -O3 -mtune=znver3`: the last
-mtune wins). `--isa avx2` builds for this machine without AVX-512, as tune_kernels.py's.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: E402

import numpy as np  # noqa: E402

from looptune import te  # noqa: E402
from looptune.backend import Backend  # noqa: E402
from looptune.backend.base import Artifact, args_info  # noqa: E402
from looptune.runtime.compiler import compile_shared, object_of  # noqa: E402
from looptune.schedule import Schedule  # noqa: E402
from looptune.target import Target  # noqa: E402
from looptune.te.ops import workload  # noqa: E402
from looptune.tune import EvaluatorConfig, tune_tir  # noqa: E402

WORKLOADS = {"matmul 512": ("matmul", dict(M=512, N=512, K=512)),
             "matmul_add 1024": ("matmul_add", dict(M=1024, N=1024, K=1024)),
             "conv2d": ("conv2d", {})}
SETS = ["gcc -O3", "gcc -O3", "gcc -O3 -fno-tree-pre -fno-predictive-commoning", "gcc -O2",
        "gcc -O2 -fno-tree-pre -fno-gcse -fno-code-hoisting", "gcc -O1", "clang -O3",
        "clang -O2"]


def candidates(name: str, trials: int, seed: int, target) -> list:
    """The backend Sources of the candidates a default search measured (successfully)."""
    op, shape = WORKLOADS[name]
    func = te.create_prim_func(workload(op, **shape)[0])
    _common.fresh_kernel_cache()
    work = tempfile.mkdtemp(prefix="compile-options-")
    db = tune_tir(func, target, work, max_trials_global=trials, num_trials_per_iter=64,
                  seed=seed, evaluator=EvaluatorConfig(num_threads=1), progress=False)
    backend = Backend.for_target(target)
    out = []
    for rec in db.get_all_tuning_records():
        if rec.ok:
            sch = Schedule(func)
            rec.trace.apply_to_schedule(sch, remove_postproc=False)
            out.append(backend.generate(sch.func))
    shutil.rmtree(work, ignore_errors=True)
    return out


def flags_of(spec: str, backend) -> tuple[str, list]:
    """(compiler, flags) of a set: looptune's flags with the set's in place of -O3."""
    cc, *extra = spec.split()
    base = [f for f in backend.flags(cc) if f != "-O3"]
    if "clang" in cc:  # a GCC-only workaround (runtime.compiler.workaround_flags)
        base = [f for f in base if f != "-fno-tree-loop-if-convert"]
    return cc, base + extra


def compile_set(spec: str, sources: list, backend) -> dict:
    """Build every source with one set, one compile at a time, into a cache of its own."""
    cc, flags = flags_of(spec, backend)
    os.environ["LOOPTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="compile-options-cache-")
    compile_s, modules = [], []
    for src in sources:
        t0 = time.perf_counter()
        path = compile_shared(src.text, name=src.func.name, flags=flags, cc=cc,
                              isa=backend.target.isa())
        compile_s.append(time.perf_counter() - t0)
        art = Artifact("cpu", str(path), src.symbol, backend.target.isa(), str(object_of(path)))
        modules.append(backend.load(art, args_info(src.func)))
    return {"set": spec, "compiler": cc, "flags": flags, "compile_s": compile_s,
            "modules": modules, "kernel_s": []}


def time_kernels(built: list, sources: list) -> None:
    """Each candidate's kernel under every set, back to back (so that a drift of the
    machine's speed over the run does not favour the sets timed first), on the same random
    inputs."""
    rng = np.random.default_rng(0)
    for i, src in enumerate(sources):
        arrays = [rng.uniform(-1, 1, a.shape).astype(a.dtype) for a in args_info(src.func)]
        for m in built:
            m["kernel_s"].append(_common.module_seconds(m["modules"][i], arrays, repeat=5,
                                                        min_repeat_ms=20))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sets", nargs="+", default=SETS)
    ap.add_argument("--isa", choices=["native", "avx2"], default="native",
                    help="avx2: build for this machine without AVX-512 (see tune_kernels.py)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    target = _common.avx2_target() if args.isa == "avx2" else Target.create("cpu")
    backend = Backend.for_target(target)
    sets = [s for s in args.sets if shutil.which(s.split()[0])]
    for s in set(args.sets) - set(sets):
        print(f"skipping {s!r}: {s.split()[0]} is not installed")
    print(f"CPU: {_common.cpu_name()}; building for {target}; one thread")
    rows, raw = [], []
    for name in args.workloads:
        sources = candidates(name, args.trials, args.seed, target)
        print(f"{name}: {len(sources)} candidates, sources "
              f"{min(len(s.text) for s in sources) // 1024}-"
              f"{max(len(s.text) for s in sources) // 1024} KB")
        built = [compile_set(spec, sources, backend) for spec in sets]
        time_kernels(built, sources)
        first = built[0]
        for m in built:
            ratios = [k / f for k, f in zip(m["kernel_s"], first["kernel_s"])]
            row = {"workload": name, "set": m["set"], "compile_s": sum(m["compile_s"]),
                   "compile_vs_first": sum(m["compile_s"]) / sum(first["compile_s"]),
                   "compile_max_s": max(m["compile_s"]),
                   "kernel_vs_first_median": statistics.median(ratios),
                   "kernel_vs_first_max": max(ratios),
                   "best_ms": min(m["kernel_s"]) * 1e3,
                   "best_vs_first": min(m["kernel_s"]) / min(first["kernel_s"])}
            print("  " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{v}"
                                   for k, v in row.items() if k != "workload"), flush=True)
            rows.append(row)
            raw.append({"workload": name, **{k: v for k, v in m.items() if k != "modules"}})
    cols = [("workload", "workload"), ("set", "compiler and flags"),
            ("compile_s", "compile s", "{:.1f}"), ("compile_vs_first", "vs first", "{:.2f}"),
            ("compile_max_s", "slowest", "{:.2f}"),
            ("kernel_vs_first_median", "kernel/first (median)", "{:.2f}"),
            ("kernel_vs_first_max", "(worst)", "{:.2f}"), ("best_ms", "best ms", "{:.3f}"),
            ("best_vs_first", "best/first", "{:.2f}")]
    _common.print_table(f"Compiling the candidates of {args.trials} trials, one at a time "
                        "(ratios < 1: faster than the first set)", rows, cols)
    _common.write_json(args.json, {"benchmark": "compile_options", "cpu": Target.create("cpu").model,
                                   "isa": str(target), "trials": args.trials, "rows": rows, "raw": raw})


if __name__ == "__main__":
    main()
