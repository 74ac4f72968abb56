"""Hand schedules built from the block primitives, single-threaded, against baselines measured
in the same run:

  - matmul 1024 (multi-level tiling, a 6x16 register tile via cache_write +
    reverse_compute_at, B packed per k block via cache_read + compute_at) vs numpy;
    target: at least 70% of numpy's speed;
  - matmul_add 1024 (out = A@B + C, the add fused into the tile write-back) vs the plain
    matmul; target: within 10% of its time;
  - conv2d NCHW 1x64x56x56, 64 filters 3x3, pad 1 (padding computed per row tile, a 6
    filters x 2 rows x 8 columns register tile) vs torch.nn.functional.conv2d, or a numpy
    im2col + matmul when torch is not installed.

    python benchmarks/hand_schedules.py [--json out.json] [--emit-c matmul.c]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: E402  (single-threaded BLAS before numpy loads)

import numpy as np  # noqa: E402

import looptune as lt  # noqa: E402
from looptune import te  # noqa: E402
from looptune.runtime import aligned, empty  # noqa: E402
from looptune.te import ops  # noqa: E402


# ---------------------------------------------------------------------------- workloads
def matmul_func(n: int, add: bool):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    if not add:
        return te.create_prim_func([A, B, ops.matmul(A, B)])
    C = te.placeholder((n, n), name="C")
    return te.create_prim_func([A, B, C, ops.matmul_add(A, B, C)])


def schedule_matmul(func, *, fused_add: bool) -> lt.Schedule:
    """i = (i0, i1, i2) with a 96-row block and 6-row register tile; j = (j0, j1, j2) with a
    64-column block and 16 columns (two AVX2 vectors); k blocked by 256.
        for i0, j0:            (parallel over i0)
          C_local[96, 64] = 0                      <- cache_write, compacted to the block
          for k0:  B_panel[256, 64] = B[...]       <- cache_read + compute_at
            for i1, j1, k1:  6x16 FMA tile in registers
          C[block] = C_local (+ C_in if fused)     <- reverse_compute_at (+ inline)"""
    sch = lt.Schedule(func)
    mm = sch.get_block("matmul")
    i, j, k = sch.get_loops(mm)
    i0, i1, i2 = sch.split(i, [None, 16, 6])   # 96 rows per block; 1024 = 10*96 + 64
    j0, j1, j2 = sch.split(j, [None, 4, 16])
    k0, k1 = sch.split(k, [None, 256])
    sch.reorder(i0, j0, k0, i1, j1, k1, i2, j2)
    acc = sch.cache_write(mm, 0, "local")
    sch.reverse_compute_at(acc, j0)
    if fused_add:
        add = sch.get_block("matmul_add")
        sch.reverse_compute_at(add, j0)
        sch.reverse_compute_inline(add)
    panel = sch.cache_read(mm, 1, "global")
    sch.compute_at(panel, k0)
    sch.vectorize(sch.get_loops(panel)[-1])
    sch.vectorize(j2)
    sch.unroll(i2)
    sch.parallel(i0)
    return sch


def conv_func():
    X = te.placeholder((1, 64, 56, 56), name="X")
    W = te.placeholder((64, 64, 3, 3), name="W")
    return te.create_prim_func([X, W, ops.conv2d_nchw(X, W, stride=1, padding=1)])


def schedule_conv(func) -> lt.Schedule:
    """Rows in pairs, filters in sixes, columns in 8-wide vectors: a 6x2x8 register tile;
    the padded input computed per row pair; the 3x3 window unrolled."""
    sch = lt.Schedule(func)
    cv = sch.get_block("conv2d_nchw")
    n, k, h, w, rc, rh, rw = sch.get_loops(cv)
    k0, k1 = sch.split(k, [None, 6])
    h0, h1 = sch.split(h, [None, 2])
    w0, w1 = sch.split(w, [None, 8])
    sch.reorder(n, h0, k0, w0, rc, rh, rw, k1, h1, w1)
    acc = sch.cache_write(cv, 0, "local")
    sch.reverse_compute_at(acc, w0)
    sch.compute_at(sch.get_block("pad"), h0)
    sch.vectorize(w1)
    sch.unroll(h1)
    sch.unroll(k1)
    sch.unroll(rw)
    sch.unroll(rh)
    sch.parallel(h0)
    return sch


# ---------------------------------------------------------------------------- baselines
def conv_baseline(x, w):
    try:
        import torch
        import torch.nn.functional as F
        torch.set_num_threads(1)
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        with torch.no_grad():
            return "torch conv2d (1 thread)", (lambda: F.conv2d(tx, tw, padding=1)), \
                F.conv2d(tx, tw, padding=1).numpy()
    except ImportError:
        pass

    def im2col():
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        cols = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
        cols = cols.transpose(0, 2, 3, 1, 4, 5).reshape(56 * 56, 64 * 9)
        return (cols @ w.reshape(64, 64 * 9).T).T.reshape(1, 64, 56, 56)
    return "numpy im2col + matmul", im2col, im2col()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    ap.add_argument("--emit-c", default=None, help="write the fast matmul's C here")
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    f32 = lambda *s: aligned(rng.uniform(-1, 1, s).astype("float32"))  # noqa: E731
    n = 1024
    a, b, c = f32(n, n), f32(n, n), f32(n, n)
    rows = []

    mm = lt.build(schedule_matmul(matmul_func(n, False), fused_add=False), num_threads=1)
    out = empty((n, n), "float32")
    mm(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-3, atol=1e-3)
    t_mm = _common.module_seconds(mm, (a, b, out), repeat=args.repeat)
    buf = empty((n, n), "float32")
    t_np = _common.median_seconds(lambda: np.matmul(a, b, out=buf), repeat=args.repeat)
    rows.append({"workload": "matmul 1024", "baseline": "numpy (OpenBLAS, 1 thread)",
                 "baseline_ms": t_np * 1e3, "looptune_ms": t_mm * 1e3,
                 "gflops": 2 * n ** 3 / t_mm / 1e9, "ratio": t_np / t_mm, "target": 0.70})

    mma = lt.build(schedule_matmul(matmul_func(n, True), fused_add=True), num_threads=1)
    mma(a, b, c, out)
    np.testing.assert_allclose(out, a @ b + c, rtol=1e-3, atol=1e-3)
    t_mma = _common.module_seconds(mma, (a, b, c, out), repeat=args.repeat)
    rows.append({"workload": "matmul_add 1024 (A@B + C, fused)", "baseline": "looptune matmul 1024",
                 "baseline_ms": t_mm * 1e3, "looptune_ms": t_mma * 1e3,
                 "gflops": (2 * n ** 3 + n * n) / t_mma / 1e9, "ratio": t_mm / t_mma,
                 "target": 1 / 1.10})

    x, w = f32(1, 64, 56, 56), f32(64, 64, 3, 3)
    cv = lt.build(schedule_conv(conv_func()), num_threads=1)
    y = empty((1, 64, 56, 56), "float32")
    cv(x, w, y)
    name, fn, want = conv_baseline(x, w)
    np.testing.assert_allclose(y, want, rtol=1e-3, atol=1e-3)
    t_cv = _common.module_seconds(cv, (x, w, y), repeat=args.repeat)
    t_base = _common.median_seconds(fn, repeat=args.repeat)
    flops = 2 * 64 * 64 * 9 * 56 * 56
    rows.append({"workload": "conv2d 1x64x56x56, 64x3x3, pad 1", "baseline": name,
                 "baseline_ms": t_base * 1e3, "looptune_ms": t_cv * 1e3,
                 "gflops": flops / t_cv / 1e9, "ratio": t_base / t_cv, "target": None})

    for r in rows:
        r["met"] = None if r["target"] is None else r["ratio"] >= r["target"]
    _common.print_table("hand schedules, single-threaded (median); ratio = baseline time / "
                        "looptune time", rows, [
        ("workload", "workload"), ("baseline", "baseline"), ("baseline_ms", "baseline ms", "{:.3f}"),
        ("looptune_ms", "looptune ms", "{:.3f}"), ("gflops", "GFLOP/s", "{:.1f}"),
        ("ratio", "ratio", "{:.2f}"), ("met", "target met")])
    print("targets: matmul >= 0.70 of numpy; matmul_add within 10% of matmul (ratio >= 0.91)")
    if args.emit_c:
        Path(args.emit_c).write_text(mm.source)
        print(f"wrote the matmul's C to {args.emit_c}")
    _common.write_json(args.json, {"benchmark": "hand_schedules", "rows": rows})


if __name__ == "__main__":
    main()
