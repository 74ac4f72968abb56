"""int8 GEMM (u8 x s8 -> s32, C = A @ W.T) on the CPU's dot-product unit against the unit's
own peak, looptune's float32 matmul and ONNX Runtime's int8 MatMulInteger, one thread.

Both looptune kernels are tuned here with the same budget (tune_tir, default rules: the
int8 one searches around the target's best int8 tensor intrinsic), compiled with
compile_tir and timed as a user calls them: `mod(*arrays)` on numpy arrays, the int8
weight packed once beforehand (mod.pack, as a model packs its constants). ONNX Runtime gets
W as an initializer (its own prepacking) and one intra-op thread. The unit's peak is a
register-only loop of its instruction (_common.dot_peak_gops), timed in the same rounds as
the kernels, so that each round's drift weighs on all alike; every figure is the median.

Targets (issue 43): int8 GEMM 1024^3 >= 75% of the VNNI peak and >= 3x looptune's float32
matmul.

    python benchmarks/int8_gemm.py [--size 1024] [--trials 256] [--json out.json]

`--isa avx2` builds as for an AVX2 machine (the exact vpmaddwd path, no VNNI).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: E402  (single-threaded BLAS before numpy loads)

import numpy as np  # noqa: E402

from looptune import te  # noqa: E402
from looptune.target import Target  # noqa: E402
from looptune.tune import EvaluatorConfig, compile_tir, tune_tir  # noqa: E402


def funcs(n: int):
    A = te.placeholder((n, n), "uint8", name="A")
    W = te.placeholder((n, n), "int8", name="W")
    int8 = te.create_prim_func([A, W, te.ops.matmul(A, W, transpose_b=True, out_dtype="int32")])
    X = te.placeholder((n, n), name="X")
    Y = te.placeholder((n, n), name="Y")
    fp32 = te.create_prim_func([X, Y, te.ops.matmul(X, Y)])
    return int8, fp32


def tuned(func, target, trials: int, work: Path, seed: int):
    t0 = time.time()
    db = tune_tir(func, target, work, max_trials_global=trials, num_trials_per_iter=32,
                  seed=seed, evaluator=EvaluatorConfig(num_threads=1))
    secs = time.time() - t0
    return compile_tir(db, func, target, num_threads=1), secs


def ort_matmul_integer(a, w):
    """ONNX Runtime's MatMulInteger with W (K, N) as a constant, one thread; None without it."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    n, k = a.shape
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "W"], ["C"])], "mmi",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [n, k])],
        [helper.make_tensor_value_info("C", TensorProto.INT32, [n, w.shape[0]])],
        [numpy_helper.from_array(np.ascontiguousarray(w.T), "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"A": a})[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--trials", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--isa", choices=("native", "avx2"), default="native")
    p.add_argument("--json")
    args = p.parse_args()
    _common.fresh_kernel_cache()
    target = _common.avx2_target() if args.isa == "avx2" else Target.create("cpu")
    unit = next((u for u in ("avx512_vnni", "avx_vnni") if target.has(u)), None)
    n = args.size
    print(f"CPU: {_common.cpu_name()}; building for {target}; int8 unit: {unit or 'none'} "
          f"(intrinsics offered: {', '.join(target.tensor_intrins())})")
    int8, fp32 = funcs(n)
    with tempfile.TemporaryDirectory(prefix="looptune-int8-") as work:
        mod8, secs8 = tuned(int8, target, args.trials, Path(work) / "int8", args.seed)
        mod32, secs32 = tuned(fp32, target, args.trials, Path(work) / "fp32", args.seed)
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (n, n)).astype("uint8")
    w = rng.integers(-128, 128, (n, n)).astype("int8")
    c8 = np.zeros((n, n), "int32")
    args8 = mod8.pack(a, w, c8)  # the weight packed once, as a model's constant is
    mod8(*args8)
    np.testing.assert_array_equal(args8[2], a.astype(np.int64) @ w.astype(np.int64).T)
    x, y = rng.uniform(-1, 1, (n, n)).astype("float32"), rng.uniform(-1, 1, (n, n)).astype("float32")
    c32 = np.zeros((n, n), "float32")
    args32 = mod32.pack(x, y, c32)
    used = mod8.source.split("static inline void lt_intrin_")[1:2]
    intrin = used[0].split("(")[0] if used else "none (plain code)"
    fns = {"looptune int8": lambda: mod8(*args8), "looptune fp32": lambda: mod32(*args32),
           "numpy fp32": lambda: np.matmul(x, y, out=c32)}
    ort_fn = ort_matmul_integer(a, w)
    if ort_fn is not None:
        np.testing.assert_array_equal(ort_fn(), args8[2])
        fns["onnxruntime int8"] = ort_fn
    self_timed = ()
    if unit is not None:
        lib = _common.dot_peak_lib(unit, target)
        iters = 2_000_000
        ops = 14 * _common.DOT_UNITS[unit][3] * iters
        fns["unit peak"] = lambda: lib.lt_dot_peak(iters) / ops  # seconds per operation
        self_timed = ("unit peak",)
    times = _common.interleaved_seconds(fns, rounds=args.rounds, self_timed=self_timed)
    flops = 2 * n ** 3
    peak = 1 / times["unit peak"] / 1e9 if unit else None
    rows = []
    for k in fns:
        if k == "unit peak":
            continue
        gops = flops / times[k] / 1e9
        rows.append({"kernel": k, "ms": times[k] * 1e3, "gops": gops,
                     "of_peak": gops / peak if peak else None,
                     "vs_int8": times[k] / times["looptune int8"]})
    _common.print_table(
        f"GEMM {n}^3, one thread; {args.trials} trials each (int8 tuned in {secs8:.0f} s, "
        f"fp32 in {secs32:.0f} s); int8 kernel: {intrin}; unit peak "
        f"{peak:.0f} GOP/s" if peak else f"GEMM {n}^3, one thread (no int8 unit)",
        rows, [("kernel", "kernel"), ("ms", "ms", "{:.3f}"), ("gops", "GOP/s", "{:.1f}"),
               ("of_peak", "of unit peak", "{:.1%}"),
               ("vs_int8", "time / looptune int8", "{:.2f}x")])
    _common.write_json(args.json, {
        "cpu": _common.cpu_name(), "target": str(target), "size": n, "trials": args.trials,
        "seed": args.seed, "intrinsic": intrin, "unit": unit, "unit_peak_gops": peak,
        "tune_secs": {"int8": secs8, "fp32": secs32}, "seconds": times, "rows": rows,
        "command": " ".join(sys.argv)})


if __name__ == "__main__":
    main()
