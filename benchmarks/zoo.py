"""The model zoo end to end: public architectures as users bring them (looptune.testing.zoo:
torchvision CNNs and ViT, Hugging Face transformers in small configs, speech encoders, M5),
seeded random weights, batch 1, nothing downloaded.

For each model, in one run: both import paths (torch.export and ONNX, the file coming from
torch.onnx.export), each compiled untuned and checked against torch (max relative error
<= 1e-3); compile time cold (empty kernel cache) and warm; latency of looptune untuned (and
tuned, with --trials or --time-per-model), ONNX Runtime and torch eager, at one thread and
at all cores. Kernels are called on plain numpy arrays, as users call them.

Targets (issue 22): every model imports on at least one path and matches torch; untuned
geometric mean >= 0.8x ONNX Runtime, none below 0.5x, at one thread and all cores; tuned
(<= 30 min per model) MobileNetV2, ResNet-50 and BERT >= 1.0x ONNX Runtime, never slower
than untuned; compile <= 20 s cold, <= 2 s warm.

    python benchmarks/zoo.py [--models resnet50 bert ...] [--tier small|full] \
        [--trials N] [--time-per-model S] [--rounds 3] \
        [--work-dir D [--measure-only]] [--precision bf16] [--json zoo.json] [--png zoo.png]
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: E402  (single-threaded BLAS before numpy loads)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import looptune  # noqa: E402
from looptune.testing import zoo  # noqa: E402

ALL = os.cpu_count() or 1


def rel_err(got, want) -> float:
    want = np.asarray(want, np.float64)
    return float(np.max(np.abs(np.asarray(got, np.float64) - want)) / max(np.max(np.abs(want)),
                                                                           1e-30))


def timed_blocks(fns: dict, *, rounds: int = 3, block_s: float = 0.3) -> dict:
    """Median milliseconds per call of each function in `fns`, timed in alternating blocks
    (each block: two untimed calls, then calls for `block_s`), `rounds` times round: drift of
    a shared machine hits every side alike, and one side's idle threads (OpenMP's and ONNX
    Runtime's spin-waiting) have stopped before the other side's timed calls start."""
    samples = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            fn()
            fn()
            end = time.perf_counter() + block_s
            while True:
                t = time.perf_counter()
                fn()
                now = time.perf_counter()
                samples[k].append(now - t)
                if now >= end and len(samples[k]) >= 3:
                    break
    return {k: float(np.median(v)) * 1e3 for k, v in samples.items()}


def warm_compile_seconds(name: str, path: str, onnx_path: str, cache: str) -> float:
    """compile_model in a fresh process with everything cached: what a user's second run of
    the same model pays (the import is not counted)."""
    import subprocess
    load = (f"looptune.from_onnx({onnx_path!r})" if path == "onnx" else
            f"looptune.from_torch(*zoo.build({name!r}))")
    code = ("import time, looptune; from looptune.testing import zoo; "
            f"g = {load}; t = time.perf_counter(); looptune.compile_model(g, None, 'cpu'); "
            "print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "LOOPTUNE_CACHE_DIR": cache})
    return float(out.stdout.strip().splitlines()[-1])


def ort_session(path, threads: int):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:200] if text else ''}"


def import_both(model, inputs, onnx_path) -> dict:
    """{"torch": graph or error text, "onnx": graph or error text}, with import seconds."""
    out = {}
    for path, fn in (("torch", lambda: looptune.from_torch(model, inputs)),
                     ("onnx", lambda: looptune.from_onnx(onnx_path))):
        t0 = time.perf_counter()
        try:
            out[path] = fn()
            out[path + "_s"] = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001 - a report row, not a crash of the run
            out[path] = first_line(e)
    return out


def bench(name: str, args, work: Path) -> dict:
    spec = zoo.ZOO[name]
    model, inputs = zoo.build(name)
    arrays = [x.numpy().astype(np.int32) if x.dtype == torch.int64 else x.numpy()
              for x in inputs]
    with torch.no_grad():
        want = model(*inputs)
    want = want.numpy() if isinstance(want, torch.Tensor) else want[0].numpy()
    onnx_path = zoo.export_onnx(model, inputs, work / f"{name}.onnx")
    row = {"model": name, "family": spec.family}
    graphs = import_both(model, inputs, onnx_path)
    compiled = None
    for path in ("torch", "onnx"):
        g = graphs[path]
        if isinstance(g, str):
            row[f"{path}_import"] = g
            continue
        row[f"{path}_import"] = "ok"
        try:
            cache = tempfile.mkdtemp(prefix="zoo-cache-", dir=work)
            os.environ["LOOPTUNE_CACHE_DIR"] = cache
            t0 = time.perf_counter()
            m = looptune.compile_model(g, None, "cpu")
            cold = time.perf_counter() - t0
            m.set_num_threads(1)
            err = rel_err(m(*arrays), want)
        except Exception as e:  # noqa: BLE001
            row[f"{path}_import"] = "compile failed: " + first_line(e)
            traceback.print_exc()
            continue
        row[f"{path}_err"] = err
        if compiled is None:
            compiled, row["path"], row["graph"] = m, path, g
            row["compile_cold_s"] = cold
            row["compile_warm_s"] = warm_compile_seconds(name, path, onnx_path, cache)
            row["import_s"] = graphs[path + "_s"]
            row["kernels"] = m.desc["kernels"]
    low = None
    if compiled is not None and args.precision == "bf16":  # the same graph, its matmuls in bf16
        low = looptune.compile_model(row["graph"], None, "cpu", precision="bf16",
                                     calibration=[tuple(arrays)])
        row["bf16_err"] = rel_err(low(*arrays), want)
    row["imports"] = compiled is not None
    row["correct"] = compiled is not None and all(
        row.get(f"{p}_err", 0) <= 1e-3 for p in ("torch", "onnx"))
    for threads in (1, ALL) if ALL > 1 else (1,):
        tag = "1t" if threads == 1 else "all"
        torch.set_num_threads(threads)
        sess = ort_session(onnx_path, threads)
        feeds = {i.name: a for i, a in zip(sess.get_inputs(), [x.numpy() for x in inputs])}
        fns = {"torch": lambda: model(*inputs), "ort": lambda: sess.run(None, feeds)}
        if compiled is not None:
            compiled.set_num_threads(threads)
            fns["untuned"] = lambda: compiled(*arrays)
        if low is not None:
            low.set_num_threads(threads)
            fns["bf16"] = lambda: low(*arrays)
        with torch.no_grad():
            ms = timed_blocks(fns, rounds=args.rounds)
        if low is not None:
            row[f"bf16_vs_untuned_{tag}"] = ms["untuned"] / ms["bf16"]
        for k, v in ms.items():
            row[f"{k}_ms_{tag}"] = v
        if compiled is not None:
            row[f"untuned_vs_ort_{tag}"] = ms["ort"] / ms["untuned"]
            row[f"untuned_vs_torch_{tag}"] = ms["torch"] / ms["untuned"]
    torch.set_num_threads(1)
    tuned_before = args.measure_only and (work / f"tune_{name}" / "database.sqlite").exists()
    if compiled is not None and (args.trials or args.time_per_model or tuned_before):
        row.update(untuned=compiled, onnx_path=onnx_path, ort_arrays=[x.numpy() for x in inputs])
        tune(row, args, work, arrays, want)
    for k in ("graph", "untuned", "onnx_path", "ort_arrays"):
        row.pop(k, None)
    print(f"  {name}: " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                    for k, v in row.items() if k not in ("model",)),
          flush=True)
    return row


def tune(row, args, work: Path, arrays, want) -> None:
    graph = row["graph"]
    db_dir = work / f"tune_{row['model']}"
    if args.measure_only:  # an earlier run's database as it is: no tuning
        from looptune.tune.database.sqlite import SQLiteDatabase
        db = SQLiteDatabase(work_dir=db_dir)
        times = [r.time for r in db.get_all_tuning_records()]
        row["tuning_s"] = max(times) - min(times) if times else 0.0
    else:
        t0 = time.time()
        db = looptune.tune_model(graph, "cpu", db_dir,
                                 max_trials_global=args.trials or 100000,
                                 max_time_s=args.time_per_model or None, num_threads=1, seed=0)
        row["tuning_s"] = time.time() - t0
    row["trials"] = sum(not r.baseline for r in db.get_all_tuning_records())
    tuned = looptune.compile_model(graph, db, "cpu")
    row["tuned_err"] = rel_err(tuned(*arrays), want)
    for threads in (1, ALL) if ALL > 1 else (1,):
        tag = "1t" if threads == 1 else "all"
        tuned.set_num_threads(threads)
        row["untuned"].set_num_threads(threads)
        sess = ort_session(row["onnx_path"], threads)
        feeds = {i.name: a for i, a in zip(sess.get_inputs(), row["ort_arrays"])}
        ms = timed_blocks({"ort": lambda: sess.run(None, feeds),
                           "untuned": lambda: row["untuned"](*arrays),
                           "tuned": lambda: tuned(*arrays)}, rounds=args.rounds)
        row[f"tuned_ms_{tag}"] = ms["tuned"]
        row[f"tuned_vs_ort_{tag}"] = ms["ort"] / ms["tuned"]
        row[f"tuned_vs_untuned_{tag}"] = ms["untuned"] / ms["tuned"]


def geomean(xs) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def plot(rows, path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tags = ["1t"] + (["all"] if ALL > 1 else [])
    fig, axes = plt.subplots(len(tags), 1, figsize=(max(8, len(rows) * 0.7), 3.5 * len(tags)),
                             squeeze=False)
    for ax, tag in zip(axes[:, 0], tags):
        kinds = [("torch_ms", "torch eager"), ("untuned_ms", "looptune untuned"),
                 ("tuned_ms", "looptune tuned")]
        w = 0.27
        for i, (k, label) in enumerate(kinds):
            # ratios measured in one block each (the tuned one has its own ORT timing)
            vals = [r.get(f"{k[:-3]}_vs_ort_{tag}") or 0 if k != "torch_ms" else
                    r[f"ort_ms_{tag}"] / r[f"torch_ms_{tag}"] for r in rows]
            ax.bar([j + i * w for j in range(len(rows))], vals, w, label=label)
        ax.set_xticks([j + w for j in range(len(rows))], [r["model"] for r in rows],
                      rotation=40, ha="right")
        ax.set_ylabel("speed vs ONNX Runtime")
        ax.set_title(f"{'one thread' if tag == '1t' else f'{ALL} threads'} "
                     "(higher is faster; 1.0 = ONNX Runtime)")
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=None, choices=zoo.names())
    ap.add_argument("--tier", choices=["small", "full"], default=None,
                    help="only the models of one tier (small: the CI tier)")
    ap.add_argument("--trials", type=int, default=0, help="tuning budget per model (0: none)")
    ap.add_argument("--time-per-model", type=float, default=0,
                    help="tuning time limit per model in seconds (0: none)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating timing blocks per side (default 3)")
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--measure-only", action="store_true",
                    help="compile the models an earlier run tuned in --work-dir with their "
                         "databases and time them, without tuning (tuning s: the span of "
                         "their records)")
    ap.add_argument("--precision", choices=["float32", "bf16"], default="float32",
                    help="bf16: also compile each model with its matmuls in bfloat16 "
                    "(compile_model precision='bf16'), timed beside the float32 build")
    ap.add_argument("--json", default=None)
    ap.add_argument("--png", default=None)
    args = ap.parse_args()
    names = args.models or zoo.names(args.tier)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="zoo-"))
    work.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    import onnxruntime
    print(f"CPU: {_common.cpu_name()}; {ALL} cores; torch {torch.__version__}, onnxruntime "
          f"{onnxruntime.__version__}; work dir {work}", flush=True)
    rows = []
    for name in names:
        try:
            rows.append(bench(name, args, work))
        except Exception as e:  # noqa: BLE001 - one model's failure is a row, not the end
            traceback.print_exc()
            rows.append({"model": name, "imports": False, "error": first_line(e)})
    for r in rows:  # the import columns: "ok" or the error's first words
        for p in ("torch_import", "onnx_import"):
            if r.get(p) and r[p] != "ok":
                r[p] = r[p][:48]
    _common.print_table("imports (relative error vs torch) and untuned compile time", rows,
                        [("model", "model"), ("torch_import", "torch.export"),
                         ("torch_err", "err", "{:.1e}"), ("onnx_import", "ONNX"),
                         ("onnx_err", "err", "{:.1e}"), ("path", "timed"),
                         ("kernels", "kernels"), ("compile_cold_s", "cold s", "{:.1f}"),
                         ("compile_warm_s", "warm s", "{:.2f}")])
    for tag in ["1t"] + (["all"] if ALL > 1 else []):
        _common.print_table(
            f"latency at {'one thread' if tag == '1t' else f'{ALL} threads'}, batch 1 (median "
            "ms; vs ORT > 1: looptune faster)", rows,
            [("model", "model"), (f"torch_ms_{tag}", "torch", "{:.2f}"),
             (f"ort_ms_{tag}", "ORT", "{:.2f}"), (f"untuned_ms_{tag}", "untuned", "{:.2f}"),
             (f"untuned_vs_ort_{tag}", "vs ORT", "{:.2f}"), (f"tuned_ms_{tag}", "tuned", "{:.2f}"),
             (f"tuned_vs_ort_{tag}", "tuned vs ORT", "{:.2f}"),
             (f"tuned_vs_untuned_{tag}", "tuned vs untuned", "{:.2f}"), ("trials", "trials"),
             ("tuning_s", "tuning s", "{:.0f}")])
    summary = {"imported": sum(bool(r.get("imports")) for r in rows), "models": len(rows),
               "correct": sum(bool(r.get("correct")) for r in rows)}
    for tag in ["1t"] + (["all"] if ALL > 1 else []):
        ratios = [r.get(f"untuned_vs_ort_{tag}") for r in rows if r.get(f"untuned_vs_ort_{tag}")]
        summary[f"untuned_geomean_vs_ort_{tag}"] = geomean(ratios)
        summary[f"untuned_min_vs_ort_{tag}"] = min(ratios) if ratios else None
    print("summary:", ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                for k, v in summary.items()))
    print("targets: every model imports and matches torch (<= 1e-3); untuned geomean >= 0.8x "
          "ORT, none below 0.5x; compile <= 20 s cold, <= 2 s warm")
    if args.png:
        plot([r for r in rows if r.get("ort_ms_1t")], args.png)
        print(f"wrote {args.png}")
    _common.write_json(args.json, {"benchmark": "zoo", "cpu": _common.cpu_name(), "cores": ALL,
                                   "summary": summary, "rows": rows})


if __name__ == "__main__":
    main()
