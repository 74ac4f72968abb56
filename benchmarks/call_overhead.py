"""What calling a compiled kernel from Python costs on top of the kernel itself.

Tiny kernels (relu on 16 floats: 2 arrays; d = a * b + c: 4 arrays) are called the way a user
calls them, `mod(*arrays)` with ordinary numpy arrays, and timed from Python (median of
repeated loops). The kernel's own time comes from the C timer (`time_evaluator`); the
difference is the per-call overhead. numpy doing the same work is the baseline.

    python benchmarks/call_overhead.py [--repeat 15] [--json out.json]

Target: an overhead of at most 0.15 us for 4 arrays (it was 28 us, then 0.6 us through ctypes).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: E402  (sets single-threaded BLAS before numpy loads)

import numpy as np  # noqa: E402

import looptune as lt  # noqa: E402
from looptune import te  # noqa: E402


def relu(n: int):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.max(A[i], 0.0), name="B")
    return te.create_prim_func([A, B])


def fma(n: int):
    A, B, C = (te.placeholder((n,), name=x) for x in "ABC")
    D = te.compute((n,), lambda i: A[i] * B[i] + C[i], name="D")
    return te.create_prim_func([A, B, C, D])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    n = args.n
    rng = np.random.default_rng(0)
    x = [rng.uniform(-1, 1, n).astype("float32") for _ in range(4)]
    cases = [
        ("relu", relu(n), [x[0], np.empty(n, "float32")],
         lambda a, b: np.maximum(a, 0, out=b)),
        ("a*b+c", fma(n), [x[0], x[1], x[2], np.empty(n, "float32")],
         lambda a, b, c, d: np.add(np.multiply(a, b, out=d), c, out=d)),
    ]
    rows = []
    for name, func, arrays, np_fn in cases:
        mod = lt.build(func, num_threads=1)
        kernel = mod.time_evaluator(number=1000, repeat=args.repeat)(*arrays).median
        call = _common.median_seconds(lambda: mod(*arrays), repeat=args.repeat)
        base = _common.median_seconds(lambda: np_fn(*arrays), repeat=args.repeat)
        rows.append({"kernel": name, "arrays": len(arrays), "kernel_us": kernel * 1e6,
                     "call_us": call * 1e6, "overhead_us": (call - kernel) * 1e6,
                     "numpy_us": base * 1e6, "vs_numpy": base / call})
    _common.print_table(f"Per-call cost from Python, {n} float32 elements, one thread", rows, [
        ("kernel", "kernel"), ("arrays", "arrays"), ("kernel_us", "in C (us)", "{:.3f}"),
        ("call_us", "mod(*arrays) (us)", "{:.3f}"), ("overhead_us", "overhead (us)", "{:.3f}"),
        ("numpy_us", "numpy (us)", "{:.3f}"), ("vs_numpy", "numpy / call", "{:.2f}")])
    _common.write_json(args.json, {"benchmark": "call_overhead", "n": n, "rows": rows})


if __name__ == "__main__":
    main()
