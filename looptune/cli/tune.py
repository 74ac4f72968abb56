"""`looptune tune`: tune one workload end to end and report the result."""
from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

from ..te import create_prim_func
from ..te.ops import OPS, workload
from ..tir.analysis import flop_count


class CLIError(Exception):
    """A user error on the command line: printed without a traceback."""


def parse_shape(text: str | None) -> dict:
    """"M=512,N=256" -> {"M": 512, "N": 256} (ints where they parse, else strings)."""
    out = {}
    for part in filter(None, (text or "").split(",")):
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise CLIError(f"--shape: expected KEY=VALUE pairs separated by commas, got {part!r}")
        value = value.strip()
        try:
            out[key.strip()] = int(value)
        except ValueError:
            out[key.strip()] = value
    return out


def _load_user_file(path: str):
    from ..tune.task import WORKLOADS
    before = set(WORKLOADS)
    p = Path(path)
    if not p.is_file():
        raise CLIError(f"no such file: {path}")
    spec = importlib.util.spec_from_file_location(f"looptune_user_{p.stem}", p)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return sorted(set(WORKLOADS) - before) or sorted(WORKLOADS)


def resolve(spec: str, shape: dict, args: list):
    """(PrimFunc, display name, flops) for a built-in operator or FILE.py[:FUNCTION]."""
    if spec in OPS:
        defaults = ", ".join(f"{k}={v}" for k, v in OPS[spec].defaults.items())
        if args:
            raise CLIError("--args is for workload functions in a file; built-in operators take "
                           f"--shape ({defaults})")
        for key, value in shape.items():
            if key in OPS[spec].defaults and not isinstance(value, int):
                raise CLIError(f"--shape {key}={value}: {spec}'s parameters are integers "
                               f"(the defaults: {defaults})")
        try:
            tensors, _, flops = workload(spec, **shape)
        except Exception as e:  # noqa: BLE001 - the op names the bad parameter
            raise CLIError(f"--shape {', '.join(f'{k}={v}' for k, v in shape.items())}: "
                           f"{e or type(e).__name__}") from None
        params = {**OPS[spec].defaults, **shape}
        name = f"{spec}({', '.join(f'{k}={v}' for k, v in params.items())})"
        return create_prim_func(tensors, name=spec), name, float(flops)
    path, _, fname = spec.partition(":")
    if path.endswith(".py"):
        from ..tune.task import Task, get_workload
        names = _load_user_file(path)
        if not fname:
            if len(names) != 1:
                raise CLIError(f"{path} registers {len(names)} workloads ({', '.join(names)}); "
                               f"pick one with {path}:NAME")
            fname = names[0]
        try:
            task = Task(get_workload(fname), tuple(args), kwargs=shape)
        except (KeyError, TypeError) as e:
            raise CLIError(str(e).strip('"')) from None
        return task.func, task.name, flop_count(task.func)
    known = ", ".join(sorted(OPS))
    raise CLIError(f"unknown workload {spec!r}: use a built-in operator ({known}) or "
                   "FILE.py[:FUNCTION] with @register_workload functions")


def check_budget(args) -> None:
    """CLIError, naming the flag, for a budget or thread count that cannot work."""
    for flag, n in (("--trials", args.trials), ("--per-iter", args.per_iter),
                    ("--threads", args.threads)):
        if n is not None and n < 1:
            raise CLIError(f"{flag} must be at least 1, got {n}")
    time = getattr(args, "time", None)  # `looptune tune-model` has no --time
    if time is not None and not time > 0:
        raise CLIError(f"--time must be a positive number of seconds, got {time:g}")


def library_baseline(op: str, shape: dict, arrays: list, threads: int):
    """(label, median seconds) of the library call a user would make instead (numpy, or torch
    for convolutions and pooling), measured now; None for a workload without one."""
    import contextlib
    import time
    from ..te.ops import OPS
    from ..te.ops.baseline import baseline
    if op not in OPS:
        return None
    found = baseline(op, arrays[:-1], {**OPS[op].defaults, **shape}, threads=threads)
    if found is None:
        return None
    label, fn = found
    try:
        from threadpoolctl import threadpool_limits  # numpy's BLAS threads, where installed
        limit = threadpool_limits(threads)
    except ImportError:
        limit = contextlib.nullcontext()
        label += " (its default threads)"
    with limit:  # as the kernels are timed: the median of 10 repeats of at least 20 ms
        fn()
        times = []
        for _ in range(10):
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < 0.02:
                fn()
                n += 1
            times.append((time.perf_counter() - t0) / n)
    times.sort()
    return label, times[len(times) // 2]


def cluster_parts(args) -> dict:
    """The builder and runner of `--cluster ADDRESS` (a Ray cluster, connected to now so that
    a wrong address fails before tuning starts); {} without it: the local ones."""
    if not getattr(args, "cluster", None):
        return {}
    from ..tune.builder.ray import RayBuilder
    from ..tune.cluster import connect
    from ..tune.runner.ray import RayRunner
    connect(args.cluster)
    return {"builder": RayBuilder(address=args.cluster), "runner": RayRunner(address=args.cluster)}


def run(args) -> int:
    from ..target import Target
    from ..tune import EvaluatorConfig, tune_tir

    check_budget(args)
    func, name, flops = resolve(args.workload, parse_shape(args.shape), args.args or [])
    target = Target.create(args.target)
    cluster = cluster_parts(args)
    work_dir = Path(args.work_dir)
    threads = args.threads or target.cores
    budget = f"{args.trials} trials" + (f" or {args.time:g} s" if args.time else "")
    print(f"tuning {name} on {target}\n  {budget}, {threads} thread(s), work dir {work_dir}, "
          f"seed {args.seed}", file=sys.stderr)
    if cluster:
        print(f"  building and measuring on the Ray cluster {args.cluster}", file=sys.stderr)
    print(f"  search: {args.strategy}"
          + (f" with the {args.cost_model} cost model" if args.strategy == "evolutionary" else ""),
          file=sys.stderr)
    db = tune_tir(func, target, work_dir, max_trials_global=args.trials,
                  num_trials_per_iter=args.per_iter, max_time_s=args.time, seed=args.seed,
                  strategy=args.strategy,
                  cost_model=args.cost_model if args.strategy == "evolutionary" else None,
                  task_name=name, evaluator=EvaluatorConfig(num_threads=threads),
                  check_correctness=not args.no_check, progress=not args.quiet,
                  database=getattr(args, "database", None), **cluster)
    try:
        return _summary(args, db, func, name, flops, target, threads, work_dir)
    finally:
        db.close()


def _summary(args, db, func, name, flops, target, threads, work_dir) -> int:
    """What the run found: trials, failures, the best kernel against the untuned one and the
    library, its C and its schedule."""
    from ..build import build
    from ..tune import compile_tir
    from ..runtime.ndarray import random_args
    records = [r for r in db.records_of(db.commit_workload(func), target) if not r.baseline]
    failures = Counter(r.error_class for r in records if not r.ok)
    ok = [r for r in records if r.ok]
    print(f"\n{name}: {len(records)} trials in the database ({len(ok)} measured, "
          f"{sum(failures.values())} failed{': ' if failures else ''}"
          f"{', '.join(f'{n} {k}' for k, n in sorted(failures.items()))})")
    if not ok:
        print("no candidate ran successfully; see `looptune db show` for the errors")
        return 1
    mod = compile_tir(db, func, target, num_threads=threads)
    rec = mod.record
    untuned = build(func, target, num_threads=threads)
    arrays = random_args(untuned.args, 0)
    # both timed the same way, the median of 10 repeats of at least 20 ms each; a weight the
    # tuned kernel takes packed is packed once, before (as a model packs its constants)
    t_best = mod.time_evaluator(number=1, repeat=10, min_repeat_ms=20)(*mod.pack(*arrays)).median
    t_base = untuned.time_evaluator(number=1, repeat=10, min_repeat_ms=20)(*arrays).median
    gflops = f", {flops / t_best / 1e9:.1f} GFLOP/s" if flops else ""
    print(f"best: {t_best * 1e3:.4f} ms{gflops} (measured in tuning: {rec.median_secs * 1e3:.4f} ms),"
          f" {t_base / t_best:.1f}x the untuned kernel ({t_base * 1e3:.3f} ms); checked "
          "against the unscheduled program")
    if rec.baseline:
        print("the best is the default schedule: measured the same way, it beat every tuned "
              "candidate, so compile_tir uses it")
    lib = library_baseline(args.workload, parse_shape(args.shape), arrays, threads)
    if lib is not None:
        label, t_lib = lib
        print(f"library: {label} takes {t_lib * 1e3:.4f} ms on the same inputs: the tuned kernel "
              f"runs at {t_lib / t_best:.2f}x its speed")
    safe = "".join(c if c.isalnum() else "_" for c in func.name)
    c_path = work_dir / f"{safe}_best.c"
    c_path.write_text(mod.source)
    print(f"generated C: {c_path}")
    print("best schedule:")
    print("    " + rec.trace.simplified().as_python().replace("\n", "\n    "))
    return 0
