"""Tune CUDA kernels and compare each with PyTorch measured in the same run, on the same GPU
(issue 27's set):

    matmul_fp32   4096^3 fp32 (torch with TF32 off, so both do fp32 FMA)
    matmul_fp16   4096^3 fp16 inputs, fp32 accumulation and output, no tensor cores for
                  looptune (torch's fp16 matmul uses them: the ratio says what they are worth)
    matmul_bf16   the same with bfloat16 inputs
    conv2d        1 x 64 x 56 x 56, 64 3x3 filters, padding 1, fp32 (cuDNN, TF32 off)
    softmax       12 x 128 x 128 fp32 (attention scores: 1536 rows of 128), along the rows
    layer_norm    128 x 768 fp32, with gamma and beta

Each workload is tuned (EvolutionarySearch + XGBModel, target "cuda", the CUDA runner) to
each budget of --trials (checkpoints of one run: the work dir resumes; --max-time-s caps each
checkpoint's wall clock), then compiled with its best record and timed on device arrays with
CUDA events (median); the zero-search default schedule (looptune.dlight.default_schedule) is a
row of its own, and the tuner times it first as a baseline record, so a tuned kernel is never
slower than it (as tune_model does). Outputs are checked against torch's. Needs an NVIDIA GPU, cuda-python
(pip install 'looptune[cuda]') and torch with CUDA.

    python benchmarks/gpu_kernels.py [--workloads ...] [--trials 64 512] [--max-time-s S]
        [--json out.json]
"""
from __future__ import annotations

import argparse
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
from looptune.target import Target  # noqa: E402


def _matmul(M, N, K, dtype):
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis(K, "k")
    if dtype == "float32":
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    else:  # fp32 accumulation, as torch's fp16 matmul does
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("float32")
                                                   * B[k, j].astype("float32"), axis=k), name="C")
    return te.create_prim_func([A, B, C]), 2 * M * N * K


def _op(name, **shape):
    from looptune.te.ops import workload
    tensors, _, flops = workload(name, **shape)
    return te.create_prim_func(tensors), flops


# name -> (build: () -> (PrimFunc, flops), torch reference on the inputs, input dtype)
WORKLOADS = {
    "matmul_fp32": (lambda: _matmul(4096, 4096, 4096, "float32"),
                    lambda t, a, b: t.matmul(a, b), "float32"),
    "matmul_fp16": (lambda: _matmul(4096, 4096, 4096, "float16"),
                    lambda t, a, b: t.matmul(a, b).float(), "float16"),
    "matmul_bf16": (lambda: _matmul(4096, 4096, 4096, "bfloat16"),
                    lambda t, a, b: t.matmul(a, b).float(), "bfloat16"),
    "conv2d": (lambda: _op("conv2d", N=1, C=64, H=56, W=56, K=64, R=3, S=3, stride=1, pad=1,
                           dilation=1),
               lambda t, x, w: t.nn.functional.conv2d(x, w, padding=1), "float32"),
    "softmax": (lambda: _op("softmax", M=12 * 128, N=128),
                lambda t, x: t.softmax(x, dim=-1), "float32"),
    "layer_norm": (lambda: _op("layer_norm", M=128, N=768),
                   lambda t, x, g, b: t.nn.functional.layer_norm(x, (x.shape[-1],), g, b, 1e-5),
                   "float32"),
}


def to_torch(torch, a: np.ndarray):
    """A CUDA tensor of a numpy array; bfloat16 (ml_dtypes) goes through its bits."""
    if a.dtype.kind == "V" or a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(a).cuda()


def need_gpu():
    """torch and the CUDA modules, or exit saying what is missing."""
    from looptune.runtime.cuda import gpu_available
    ok, why = gpu_available()
    if not ok:
        sys.exit(f"gpu_kernels: no CUDA GPU can be used here ({why}); this benchmark runs on "
                 "a machine with an NVIDIA GPU, its driver and pip install 'looptune[cuda]'")
    try:
        import torch
    except ImportError:
        sys.exit("gpu_kernels: the baselines need torch with CUDA (pip install torch)")
    if not torch.cuda.is_available():
        sys.exit("gpu_kernels: torch sees no CUDA device; install a CUDA build of torch")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 against fp32
    torch.backends.cudnn.allow_tf32 = False
    return torch


def torch_seconds(torch, fn, *, repeat: int = 21, min_ms: float = 50.0) -> float:
    """Median seconds per call, CUDA events around a loop of calls lasting >= min_ms."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n = 1
    while True:
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        if start.elapsed_time(end) >= min_ms:
            break
        n *= 2
    out = []
    for _ in range(repeat):
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / 1e3 / n)
    return statistics.median(out)


def ours_seconds(mod, device_args) -> float:
    return mod.time_evaluator(number=1, repeat=21, min_repeat_ms=50)(*device_args).median


def check(out: np.ndarray, want: np.ndarray, what: str) -> str:
    scale = max(1.0, float(np.abs(want).max()))
    ok = np.allclose(out, want, rtol=2e-3, atol=2e-3 * scale)
    if not ok:
        print(f"  WRONG RESULT: {what} (max abs diff {np.abs(out - want).max():.3g})", flush=True)
    return "ok" if ok else "WRONG"


def measure_row(torch, mod, inputs, out_shape, want, key, variant, flops, torch_s):
    from looptune.runtime.cuda import DeviceArray
    out = np.full(out_shape, np.nan, "float32")
    mod(*inputs, out)
    verdict = check(out, want, f"{key} {variant}")
    dev = [DeviceArray.from_numpy(x) for x in (*inputs, out)]
    s = ours_seconds(mod, dev)
    return {"workload": key, "variant": variant, "looptune_ms": s * 1e3,
            "torch_ms": torch_s * 1e3, "vs_torch": torch_s / s, "gflops": flops / s / 1e9,
            "check": verdict}


def failures(db) -> None:
    """Print how many trials failed, per error class, with the first message of each."""
    first, count = {}, {}
    for r in db.get_all_tuning_records():
        if r.error_class:
            count[r.error_class] = count.get(r.error_class, 0) + 1
            first.setdefault(r.error_class, (r.error_msg or "")[:1500])
    for cls, n in count.items():
        print(f"  {n} trials failed with {cls}, the first: {first[cls]}", flush=True)


def bench(torch, key: str, args, target, out_dir: Path, emit) -> None:
    """Measure workload `key`: `emit(row)` for the default schedule, then per trial budget.
    A failure is a row with a note, and the next row is still tried."""
    import looptune as lt
    from looptune.dlight import default_schedule
    from looptune.tir import dtype as dt
    from looptune.tune import EvaluatorConfig, compile_tir, tune_tir
    build_func, ref, dtype = WORKLOADS[key]
    func, flops = build_func()
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1, 1, [int(n) for n in b.shape]).astype(dt.numpy_dtype(dtype))
              for b in func.params[:-1]]
    out_shape = tuple(int(n) for n in func.params[-1].shape)
    t_in = [to_torch(torch, x) for x in inputs]
    want = ref(torch, *t_in).float().cpu().numpy()
    torch_s = torch_seconds(torch, lambda: ref(torch, *t_in))
    print(f"{key}: torch {torch_s * 1e3:.4f} ms", flush=True)

    t0 = time.time()
    try:  # the zero-search default
        mod = lt.build(default_schedule(func, target), target)
        row = measure_row(torch, mod, inputs, out_shape, want, key, "default", flops, torch_s)
        emit({**row, "trials": 0, "tuning_wall_s": time.time() - t0})
    except Exception as e:  # noqa: BLE001 - the row says what failed
        emit({"workload": key, "variant": "default", "note": _failed(e)})

    work = out_dir / f"looptune_{key}"
    shutil.rmtree(work, ignore_errors=True)
    spent = 0.0
    for trials in sorted(args.trials):
        t0 = time.time()
        try:
            # the default schedule is timed first as a baseline record (no budget): the tuned
            # kernel is never slower than the untuned one, as with tune_model
            db = tune_tir(func, target, work, max_trials_global=trials,
                          num_trials_per_iter=args.per_iter, seed=args.seed,
                          cost_model=args.cost_model, builder="cuda", runner="cuda",
                          max_time_s=args.max_time_s, default_schedule=default_schedule,
                          evaluator=EvaluatorConfig(number=1, repeat=5, min_repeat_ms=20))
            spent += time.time() - t0
            failures(db)
            mod = compile_tir(db, func, target)
        except Exception as e:  # noqa: BLE001 - the row says what failed
            emit({"workload": key, "variant": f"tuned {trials}", "trials": trials,
                  "note": _failed(e)})
            print(f"  {key} @ {trials}: {_failed(e)}", flush=True)
            break
        row = measure_row(torch, mod, inputs, out_shape, want, key, f"tuned {trials}", flops,
                          torch_s)
        done = sum(not r.baseline for r in db.get_all_tuning_records())
        row.update(trials=done, tuning_wall_s=spent, s_per_trial=spent / max(done, 1),
                   record_ms=mod.record.median_secs * 1e3 if getattr(mod, "record", None)
                   else None, choice=getattr(mod, "choice", None))
        emit(row)
        print(f"  {key} @ {trials}: {row['looptune_ms']:.4f} ms, torch {torch_s * 1e3:.4f} ms "
              f"-> {row['vs_torch']:.2f}x; {spent:.0f} s tuning; {row['choice']}", flush=True)


def _failed(e: Exception) -> str:
    return f"failed: {type(e).__name__}: {e}"[:600]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--trials", type=int, nargs="+", default=[64, 512])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-iter", type=int, default=64)
    ap.add_argument("--max-time-s", type=float, default=None,
                    help="wall-clock cap of each tuning checkpoint, seconds")
    ap.add_argument("--cost-model", default="xgb")
    ap.add_argument("--keep", default=None, help="keep the work dirs here")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch = need_gpu()
    _common.fresh_kernel_cache()  # every trial pays for its compile
    out_dir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpu-kernels-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    target = Target.create("cuda")
    print(f"GPU: {target.model} ({target.arch}, {target.cores} SMs); torch "
          f"{torch.__version__}, TF32 off", flush=True)
    rows = []

    def emit(row):  # the JSON is rewritten with every row: a run cut short keeps its rows
        rows.append(row)
        if "looptune_ms" in row:
            print(f"  {row['workload']} {row['variant']}: {row['looptune_ms']:.4f} ms "
                  f"({row['vs_torch']:.2f}x torch), {row['check']}", flush=True)
        save()

    def save():
        _common.write_json(args.json, {"benchmark": "gpu_kernels", "gpu": target.model,
                                       "arch": target.arch, "torch": torch.__version__,
                                       "seed": args.seed, "rows": rows})

    for key in args.workloads:
        bench(torch, key, args, target, out_dir, emit)
    cols = [("workload", "workload"), ("variant", "variant"), ("trials", "trials"),
            ("looptune_ms", "looptune ms", "{:.4f}"), ("record_ms", "record ms", "{:.4f}"),
            ("torch_ms", "torch ms", "{:.4f}"), ("vs_torch", "vs torch", "{:.2f}x"),
            ("gflops", "GFLOP/s", "{:.0f}"), ("tuning_wall_s", "tuning s", "{:.0f}"),
            ("check", "check"), ("note", "note")]
    _common.print_table(f"CUDA kernels on {target.model} (ratios > 1: looptune is faster)",
                        rows, cols)
    save()


if __name__ == "__main__":
    main()
