"""`looptune tune-model` and `looptune run`: whole models from ONNX or torch.export files."""
from __future__ import annotations

import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from .tune import CLIError


MODEL_FILES = (".onnx", ".pt2")
DEFAULT_WORK_DIR = "looptune-work"


def import_model(path: Path):
    """The graph of an .onnx file or a .pt2 file (torch.export.save); the importer's errors
    pass through."""
    if path.suffix == ".onnx":
        from ..frontend.onnx import from_onnx
        return from_onnx(str(path))
    from ..frontend.torch import _torch, from_torch
    return from_torch(_torch().export.load(str(path)))


def load_graph(path: str):
    p = Path(path)
    if not p.is_file():
        raise CLIError(f"no such file: {path}")
    if p.suffix not in MODEL_FILES:
        raise CLIError(f"{path}: looptune reads models from .onnx files and .pt2 files "
                       "(torch.export.save); from Python, looptune.from_torch imports a "
                       "torch module")
    try:
        return import_model(p)
    except ImportError as e:
        raise CLIError(str(e)) from None
    except ValueError as e:  # GraphError and the importer's errors
        raise CLIError(f"{path}: {e}") from None


def random_inputs(compiled, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for _, shape, dtype in compiled.inputs:
        if dtype.startswith("int"):
            out.append(rng.integers(0, 2, shape).astype(dtype))
        else:
            out.append(rng.uniform(-1, 1, shape).astype(dtype))
    return out


def latency(compiled, inputs, *, repeat: int = 15, min_time: float = 0.1) -> float:
    """Median seconds per call, the way a user calls it."""
    compiled(*inputs)
    n = 1
    while True:
        t = time.perf_counter()
        for _ in range(n):
            compiled(*inputs)
        if time.perf_counter() - t >= min_time or n >= 1 << 16:
            break
        n *= 2
    res = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(n):
            compiled(*inputs)
        res.append((time.perf_counter() - t) / n)
    return statistics.median(res)


def calibration(path, graph) -> list | None:
    """The examples of a calibration .npz (one array per model input, by name, examples
    stacked along a first axis) as a list of input tuples; None without a path."""
    if path is None:
        return None
    try:
        data = np.load(path)
    except (OSError, ValueError) as e:
        raise CLIError(f"--calibration {path}: {e}") from None
    missing = [v.name for v in graph.inputs if v.name not in data.files]
    if missing:
        raise CLIError(f"--calibration {path} has no array for input(s) {', '.join(missing)} "
                       f"(it holds {', '.join(data.files) or 'nothing'})")
    arrays = [data[v.name] for v in graph.inputs]
    for v, a in zip(graph.inputs, arrays):
        if a.shape[1:] != tuple(v.shape):
            raise CLIError(f"--calibration {path}: {v.name} must be (examples, "
                           f"{', '.join(map(str, v.shape))}), got {a.shape}")
        if len(a) != len(arrays[0]) or not len(a):
            raise CLIError(f"--calibration {path}: {v.name} holds {len(a)} examples"
                           + (f", {graph.inputs[0].name} {len(arrays[0])}" if v is not
                              graph.inputs[0] else "") + "; give one or more of each input")
    return [tuple(a[k] for a in arrays) for k in range(len(arrays[0]))]


def summary(graph, db, target, threads, precision="float32",
            calibrate=None) -> tuple[list, object, object]:
    """Rows per task, and the untuned and tuned compiled models."""
    from ..graph import compile_model, extract_tasks
    from ..graph.precision import lower_precision
    tuned = compile_model(graph, db, target, num_threads=threads, precision=precision,
                          calibration=calibrate)
    low = lower_precision(graph, precision, calibration=calibrate)
    untuned = compile_model(low, None, target, num_threads=threads)  # the report: once
    rows = []
    for t, info in zip(extract_tasks(low, target), tuned.desc["tasks"]):
        n = sum(not r.baseline for r in db.records_like(t.func)) if db.has_workload(t.func) \
            else 0
        rows.append({"task": t.task_name, "weight": t.weight, "trials": n,
                     "choice": info["choice"], "tuned_ms": info["tuned_ms"],
                     "default_ms": info["default_ms"], "best_ms": info["record_ms"]})
    total = sum(r["weight"] * r["best_ms"] for r in rows if r["best_ms"] is not None)
    for r in rows:
        r["share"] = None if r["best_ms"] is None or not total else \
            r["weight"] * r["best_ms"] / total
    return rows, untuned, tuned


def _ms(v) -> str:
    return "-" if v is None else f"{v:.4f}"


def print_summary(rows, untuned, tuned, inputs):
    """A row per task: which schedule the compiled model runs (the tuned record, or the
    default schedule where it was faster, measured the same way) and both times."""
    print(f"{'task':<40} {'weight':>6} {'trials':>7} {'tuned ms':>10} {'default ms':>10} "
          f"{'runs':>8} {'share':>6}")
    for r in rows:
        share = "" if r["share"] is None else f"{100 * r['share']:.0f}%"
        print(f"{r['task'][:40]:<40} {r['weight']:>6} {r['trials']:>7} {_ms(r['tuned_ms']):>10} "
              f"{_ms(r['default_ms']):>10} {r['choice']:>8} {share:>6}")
    kept = sum(r["choice"] == "default" for r in rows)
    if kept:
        print(f"{kept} task(s) keep the default schedule: no tuned record beat it")
    t_un = latency(untuned, inputs)
    t_tu = latency(tuned, inputs)
    print(f"end to end: {t_tu * 1e3:.4f} ms tuned, {t_un * 1e3:.4f} ms untuned (default "
          f"schedules): {t_un / t_tu:.2f}x")


def _print_warning(message, category, filename, lineno, file=None, line=None):
    print(f"warning: {message}", file=sys.stderr)


def tune_model_cmd(args) -> int:
    from ..graph import extract_tasks, tune_model
    from ..target import Target
    from .tune import check_budget, cluster_parts
    check_budget(args)
    graph = load_graph(args.model)
    target = Target.create(args.target)
    tasks = extract_tasks(graph, target)
    cluster = cluster_parts(args)
    print(f"{args.model}: {len(graph.nodes)} operators, {len(tasks)} tasks on {target}"
          + (f", built and measured on the Ray cluster {args.cluster}" if cluster else ""))
    examples = calibration(args.calibration, graph)
    try:
        with warnings.catch_warnings():  # a budget that cannot cover the tasks: one line
            warnings.showwarning = _print_warning
            db = tune_model(graph, target, args.work_dir, max_trials_global=args.trials,
                            op_names=args.op_names, num_trials_per_iter=args.per_iter,
                            seed=args.seed, progress=not args.quiet, num_threads=args.threads,
                            database=getattr(args, "database", None),
                            precision=args.precision, calibration=examples, **cluster)
    except ValueError as e:
        raise CLIError(str(e)) from None
    try:
        rows, untuned, tuned = summary(graph, db, target, args.threads, args.precision,
                                       examples)
        print_summary(rows, untuned, tuned, random_inputs(tuned))
    finally:
        db.close()
    return 0


def _records(work_dir, database=None):
    """The database of `looptune run`: the --work-dir given (which must hold one), else
    ./looptune-work if it holds one, else None (every kernel runs its default schedule);
    with --database, that one too (cli.db.open_database)."""
    from ..tune.database.work_dir import formats_in
    from .db import open_database
    if work_dir is None:
        if database is not None:
            return open_database(DEFAULT_WORK_DIR, database)
        if not formats_in(DEFAULT_WORK_DIR):
            return None
        work_dir = DEFAULT_WORK_DIR
    return open_database(work_dir, database)


def run_cmd(args) -> int:
    from ..graph import GraphError, compile_model
    from ..target import Target
    graph = load_graph(args.model)
    target = Target.create(args.target)
    db = _records(args.work_dir, getattr(args, "database", None))
    try:
        compiled = compile_model(graph, db, target, num_threads=args.threads,
                                 precision=args.precision,
                                 calibration=calibration(args.calibration, graph))
    except GraphError as e:  # a precision without the calibration it needs, NaN in it
        raise CLIError(str(e)) from None
    tuned = sum(t["tuned"] for t in compiled.desc["tasks"])
    kept = sum(t.get("choice") == "default" for t in compiled.desc["tasks"])
    print(f"{compiled}")
    print(f"{tuned} of {len(compiled.desc['tasks'])} tasks tuned"
          + (f", {kept} on the default schedule (faster than their tuned records)" if kept
             else "")
          + ("" if db is not None else f" (no database in {DEFAULT_WORK_DIR}; --work-dir names "
                                       "one)"))
    for t in compiled.desc["tasks"]:
        if t.get("choice", "untuned") != "untuned":
            print(f"  {t['task_name']}: runs {t['choice']} (tuned {_ms(t.get('tuned_ms'))} ms, "
                  f"default {_ms(t.get('default_ms'))} ms)")
    t = latency(compiled, random_inputs(compiled))
    print(f"latency: {t * 1e3:.4f} ms per inference ({compiled.num_threads} threads)")
    return 0
