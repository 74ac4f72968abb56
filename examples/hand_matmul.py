"""A worked example: define a matmul, schedule it by hand, look at the trace and the C,
check it against numpy, and time it against numpy (single-threaded).

    python examples/hand_matmul.py [--n 512]
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # single-threaded numpy baseline

import numpy as np  # noqa: E402

import looptune as lt  # noqa: E402
from looptune import te  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=512, help="matrix size (default 512)")
    n = ap.parse_args().n

    # 1. What to compute: C = A @ B
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis(n, name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    func = te.create_prim_func([A, B, C])

    # 2. How to compute it: an 8x16 register tile, k blocked for the cache
    sch = lt.Schedule(func)
    block = sch.get_block("C")
    i, j, kk = sch.get_loops(block)
    i0, i1 = sch.split(i, [None, 8])
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(kk, [None, 128])
    sch.reorder(k0, i0, j0, k1, i1, j1)
    sch.vectorize(j1)
    sch.unroll(i1)
    sch.parallel(i0)

    print("== the trace (replayable, JSON-serializable) ==")
    print(sch.trace)
    print("\n== the scheduled loop nest ==")
    print(sch.func.script())

    # 3. Compile with the system C compiler; run on random inputs; check against numpy
    mod = lt.build(sch, num_threads=1)
    print("\n== the generated C (kernel) ==")
    src = mod.source
    print(src[src.index("int32_t C_kernel("):])
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype("float32")
    b = rng.uniform(-1, 1, (n, n)).astype("float32")
    c = np.zeros((n, n), "float32")
    mod(a, b, c)
    err = float(np.abs(c - a @ b).max())
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
    print(f"correct: max abs error vs numpy {err:.2e}")

    # 4. Speed, single-threaded, against numpy and the unscheduled kernel
    t_ours = mod.time_evaluator(number=1, repeat=15, min_repeat_ms=50)(a, b, c).median
    naive = lt.build(func, num_threads=1)
    t_naive = naive.time_evaluator(number=1, repeat=3)(a, b, c).median
    out = np.empty_like(c)
    np.matmul(a, b, out=out)
    ts = []
    for _ in range(15):
        t = time.perf_counter()
        np.matmul(a, b, out=out)
        ts.append(time.perf_counter() - t)
    t_np = float(np.median(ts))
    gf = 2 * n ** 3 / 1e9
    print(f"\nmatmul {n}, 1 thread:  naive {t_naive * 1e3:.2f} ms ({gf / t_naive:.1f} GFLOP/s)  "
          f"hand schedule {t_ours * 1e3:.2f} ms ({gf / t_ours:.1f} GFLOP/s)  "
          f"numpy {t_np * 1e3:.2f} ms ({gf / t_np:.1f} GFLOP/s)")
    print(f"hand schedule: {t_naive / t_ours:.1f}x faster than naive, {t_np / t_ours:.0%} of numpy")


if __name__ == "__main__":
    main()
