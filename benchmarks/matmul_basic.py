"""matmul 512 float32, single-threaded: the naive (unscheduled) kernel vs a hand schedule
(tile, reorder, vectorize, unroll, parallel) vs numpy, all measured in this run.

    python benchmarks/matmul_basic.py [--n 512] [--json out.json]

The hand schedule must be at least 5x faster than the naive kernel.
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
from looptune.runtime import aligned, empty  # noqa: E402


def matmul(n: int):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis(n, "k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def hand_schedule(func) -> lt.Schedule:
    """An 8x16 register tile (two 8-float vectors per row), k blocked by 128 so a panel of B
    stays in L2, the row tiles parallel."""
    sch = lt.Schedule(func)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 8])
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(k, [None, 128])
    sch.reorder(k0, i0, j0, k1, i1, j1)
    sch.vectorize(j1)
    sch.unroll(i1)
    sch.parallel(i0)
    return sch


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    n = args.n
    func = matmul(n)
    rng = np.random.default_rng(0)
    a = aligned(rng.uniform(-1, 1, (n, n)).astype("float32"))
    b = aligned(rng.uniform(-1, 1, (n, n)).astype("float32"))
    want = a @ b
    flops = 2 * n ** 3

    naive = lt.build(func, num_threads=1)
    hand = lt.build(hand_schedule(func), num_threads=1)
    rows = []
    for name, mod in (("naive (unscheduled)", naive), ("hand schedule", hand)):
        c = empty((n, n), "float32")
        mod(a, b, c)
        np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-3)
        secs = _common.module_seconds(mod, (a, b, c), repeat=9 if "naive" in name else 25)
        rows.append({"kernel": name, "ms": secs * 1e3, "gflops": flops / secs / 1e9})
    out = empty((n, n), "float32")
    secs = _common.median_seconds(lambda: np.matmul(a, b, out=out), repeat=25)
    rows.append({"kernel": "numpy (OpenBLAS, 1 thread)", "ms": secs * 1e3, "gflops": flops / secs / 1e9})
    base = rows[0]["ms"]
    np_ms = rows[2]["ms"]
    for r in rows:
        r["speedup_vs_naive"] = base / r["ms"]
        r["fraction_of_numpy"] = np_ms / r["ms"]
    _common.print_table(f"matmul {n}x{n}x{n} float32, single-threaded (median)", rows, [
        ("kernel", "kernel"), ("ms", "ms", "{:.3f}"), ("gflops", "GFLOP/s", "{:.1f}"),
        ("speedup_vs_naive", "vs naive", "{:.1f}x"), ("fraction_of_numpy", "of numpy", "{:.0%}")])
    ok = rows[1]["speedup_vs_naive"] >= 5
    print(f"hand schedule vs naive: {rows[1]['speedup_vs_naive']:.1f}x (target >= 5x: "
          f"{'met' if ok else 'MISSED'})")
    _common.write_json(args.json, {"benchmark": "matmul_basic", "n": n, "rows": rows,
                                   "target_speedup_vs_naive": 5, "met": ok})


if __name__ == "__main__":
    main()
