"""Hand-written C models of matmul_add loop nests, timed against numpy: what a loop order,
its tile sizes and its packed copies cost, apart from the search that has to find them.

Every variant computes out = A @ B + C (M x 1024 x 1024, M = 1026, a multiple of every row
tile below) with the same register tile (MR rows x NV vectors of B's columns, broadcast A,
FMA into accumulators held in registers over the reduction tile, KC steps), compiled for
the Target's ISA as looptune compiles its kernels, and called through ctypes on ordinary
numpy arrays. They differ in the loops around it:

- `tile`: looptune's nest (multi-level tiling "SSRSRS" with B's panel copied per reduction
  tile, `read_operands=("vector",)`): for each column tile of NB columns and row tile of MB
  rows, a local accumulator tile; per KC reduction steps, B's KC x NB panel copied, then
  the register tiles over the row tile, A read where it lies.
- `goto`: GotoBLAS's order, which multi-level tiling cannot express: per NC columns and KC
  reduction steps, B's panel copied once in register-tile order (each NV-vector strip
  contiguous) for all rows, then per MB rows (A's block, optionally packed by register-tile
  rows) every strip of the panel, accumulating into the output itself.
- `panel`: looptune's tiles with both operands packed per reduction tile, as BLIS packs
  them: B's panel as contiguous strips of NV vectors, A's block by register-tile rows, step
  by step (or read in place), and the strips walked outside the rows (j outer: the strip
  stays in L1 while A's block streams from L2) or inside them (i outer).

Timed in alternation with numpy's `np.add(np.matmul(a, b, out=o), c, out=o)` over ROUNDS
rounds; prints each variant's median and fastest time against numpy's (the fastest of many
rounds is the steadier figure on a shared machine). First, the register tile alone: the
same micro-kernel called on small operands that stay in L1, against the measured FMA peak
(what the nests lose beyond it goes to the memory hierarchy).

    python benchmarks/matmul_nests.py [--isa avx2] [--register-tile 3x4] [--rounds 60]
        [--json out.json]
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from tune_kernels import _isa_arg  # noqa: E402, F401  (first: --isa avx2 holds numpy to AVX2)

import _common  # noqa: E402
import numpy as np  # noqa: E402

from looptune.backend.cpu import isa_flags  # noqa: E402
from looptune.runtime.compiler import compile_shared  # noqa: E402
from looptune.target import Target  # noqa: E402

M, N, K = 1026, 1024, 1024

SOURCE = r"""
#include <string.h>
#define M 1026
#define N 1024
#define K 1024
typedef float vf __attribute__((vector_size(VL * 4)));
typedef float vfu __attribute__((vector_size(VL * 4), aligned(4), may_alias));
#define NR (VL * NV)
#define MB (MR * NI2)
#if VL == 16
static inline vf bcast(float x) { vf v = {x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; return v; }
#else
static inline vf bcast(float x) { vf v = {x, x, x, x, x, x, x, x}; return v; }
#endif

/* acc (rows cs apart) += a (rows as apart, steps ak apart) x b (steps bs apart), KC steps */
static __attribute__((noinline)) void micro(const float* restrict a, long as, long ak,
                                            const float* restrict b, long bs,
                                            float* restrict acc, long cs) {
  vf c[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) c[r][v] = *(const vfu*)(acc + r * cs + v * VL);
  for (int k = 0; k < KC; ++k) {
    vf bv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) bv[v] = *(const vfu*)(b + k * bs + v * VL);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      vf x = bcast(a[r * as + k * ak]);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) c[r][v] += x * bv[v];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) *(vfu*)(acc + r * cs + v * VL) = c[r][v];
}

/* the register tile alone: `reps` calls on the same small operands, all in L1 */
static float uA[MR * KC] __attribute__((aligned(64)));
static float uB[KC * NR] __attribute__((aligned(64)));
static float uC[MR * NR] __attribute__((aligned(64)));
int micro_alone(long reps) {
  for (int i = 0; i < MR * KC; ++i) uA[i] = 1e-3f * (i % 7);
  for (int i = 0; i < KC * NR; ++i) uB[i] = 1e-3f * (i % 5);
  for (long r = 0; r < reps; ++r) micro(uA, 1, MR, uB, NR, uC, NR);
  return (int)uC[0];
}

#if GOTO
static float Bp[KC * NC] __attribute__((aligned(64)));
static float Ap[MB * KC] __attribute__((aligned(64)));
int kern(const float* restrict A, const float* restrict B, const float* restrict C,
         float* restrict out) {
  memcpy(out, C, sizeof(float) * M * N);
  for (int jc = 0; jc < N; jc += NC)
    for (int pc = 0; pc < K; pc += KC) {
      for (int js = 0; js < NC; js += NR)  /* each NR-column strip: KC x NR, contiguous */
        for (int k = 0; k < KC; ++k)
          for (int j = 0; j < NR; j += VL)
            *(vfu*)(Bp + js * KC + k * NR + j) =
                *(const vfu*)(B + (long)(pc + k) * N + jc + js + j);
      for (int ic = 0; ic < M; ic += MB) {
#if PACKA
        for (int i2 = 0; i2 < NI2; ++i2)  /* by register-tile rows, step-major */
          for (int k = 0; k < KC; ++k)
            for (int r = 0; r < MR; ++r)
              Ap[i2 * MR * KC + k * MR + r] = A[(long)(ic + i2 * MR + r) * K + pc + k];
#endif
        for (int js = 0; js < NC; js += NR)
          for (int i2 = 0; i2 < NI2; ++i2)
#if PACKA
            micro(Ap + i2 * MR * KC, 1, MR, Bp + js * KC, NR,
                  out + (long)(ic + i2 * MR) * N + jc + js, N);
#else
            micro(A + (long)(ic + i2 * MR) * K + pc, K, 1, Bp + js * KC, NR,
                  out + (long)(ic + i2 * MR) * N + jc + js, N);
#endif
      }
    }
  return 0;
}
#else
#define NB (NR * NJ2)
#if PANEL  /* B's panel as NR-column strips, each KC x NR and contiguous */
#define STRIP(j2) (Bp + (j2) * KC * NR)
#define BS NR
#else  /* B's panel row by row, KC x NB */
#define STRIP(j2) (Bp + (j2) * NR)
#define BS NB
#endif
static float tile[MB * NB] __attribute__((aligned(64)));
static float Bp[KC * NB] __attribute__((aligned(64)));
static float Ap[MB * KC] __attribute__((aligned(64)));
int kern(const float* restrict A, const float* restrict B, const float* restrict C,
         float* restrict out) {
  for (int col = 0; col < N; col += NB)
    for (int row = 0; row < M; row += MB) {
      memset(tile, 0, sizeof tile);
      for (int k0 = 0; k0 < K; k0 += KC) {
#if PANEL
        for (int j2 = 0; j2 < NJ2; ++j2)
          for (int k = 0; k < KC; ++k)
            for (int j = 0; j < NR; j += VL)
              *(vfu*)(STRIP(j2) + k * NR + j) =
                  *(const vfu*)(B + (long)(k0 + k) * N + col + j2 * NR + j);
#else
        for (int k = 0; k < KC; ++k)
          for (int j = 0; j < NB; j += VL)
            *(vfu*)(Bp + k * NB + j) = *(const vfu*)(B + (long)(k0 + k) * N + col + j);
#endif
#if PACKA
        for (int i2 = 0; i2 < NI2; ++i2)  /* by register-tile rows, step-major */
          for (int k = 0; k < KC; ++k)
            for (int r = 0; r < MR; ++r)
              Ap[i2 * MR * KC + k * MR + r] = A[(long)(row + i2 * MR + r) * K + k0 + k];
#endif
#if JOUTER
        for (int j2 = 0; j2 < NJ2; ++j2)
          for (int i2 = 0; i2 < NI2; ++i2)
#else
        for (int i2 = 0; i2 < NI2; ++i2)
          for (int j2 = 0; j2 < NJ2; ++j2)
#endif
#if PACKA
            micro(Ap + i2 * MR * KC, 1, MR, STRIP(j2), BS, tile + i2 * MR * NB + j2 * NR, NB);
#else
            micro(A + (long)(row + i2 * MR) * K + k0, K, 1, STRIP(j2), BS,
                  tile + i2 * MR * NB + j2 * NR, NB);
#endif
      }
      for (int i = 0; i < MB; ++i)
        for (int j = 0; j < NB; j += VL)
          *(vfu*)(out + (long)(row + i) * N + col + j) =
              *(const vfu*)(tile + i * NB + j) + *(const vfu*)(C + (long)(row + i) * N + col + j);
    }
  return 0;
}
#endif
"""

# (order, register tiles of rows per row tile (0: all M rows), register tiles of columns
# per column tile (tile) or columns per panel (goto), reduction steps, A packed)
VARIANTS = [
    ("tile", 57, 2, 64, 0),  # the best as-AVX2 record of a search with k tiles up to 128
    ("tile", 57, 2, 128, 0),
    ("tile", 0, 1, 256, 0),
    ("tile", 171, 4, 256, 0),  # the best as-AVX2 record with k tiles up to 256 (3x32 tile)
    ("goto", 57, 1024, 128, 0),
    ("goto", 57, 256, 128, 0),
    ("goto", 57, 1024, 128, 1),
    ("panel", 171, 4, 128, 0),  # i outer, A's block and B's strips packed
    ("panel", 171, 4, 128, 2),  # j outer, B's strips packed, A read in place
    ("panel", 171, 4, 128, 1),  # j outer, both packed
    ("panel", 57, 16, 128, 1),
]


def macros(variant, mr: int, nr: int) -> tuple[str, dict]:
    order, ni2, cols, kc, pack_a = variant
    ni2 = ni2 or M // mr
    if order == "tile":
        name = f"tile {mr * ni2}x{nr * cols} k{kc}"
        return name, dict(GOTO=0, PANEL=0, NI2=ni2, NJ2=cols, NC=nr * cols, KC=kc, PACKA=0)
    if order == "panel":
        name = (f"panel {mr * ni2}x{nr * cols} k{kc} " + ("j outer" if pack_a else "i outer")
                + (" packed A" if pack_a == 1 else ""))
        return name, dict(GOTO=0, PANEL=1, NI2=ni2, NJ2=cols, NC=nr * cols, KC=kc,
                          JOUTER=int(pack_a > 0), PACKA=int(pack_a == 1))
    name = f"goto {mr * ni2} rows x {cols} k{kc}" + (" packed A" if pack_a else "")
    return name, dict(GOTO=1, PANEL=0, NI2=ni2, NJ2=1, NC=cols, KC=kc, PACKA=pack_a)


def build(target: Target, defs: dict, mr: int, nv: int):
    lanes = target.vector_bits // 32
    defs = {"VL": lanes, "MR": mr, "NV": nv, **defs}
    src = "".join(f"#define {k} {v}\n" for k, v in defs.items()) + SOURCE
    flags = ["-O3", "-fPIC", "-shared", "-std=gnu11", *isa_flags(target)]
    lib = ctypes.CDLL(str(compile_shared(src, name="matmul_nest", flags=flags)))
    lib.kern.argtypes = [ctypes.c_void_p] * 4
    lib.micro_alone.argtypes = [ctypes.c_long]
    return lib


def micro_alone_gflops(target: Target, mr: int, nv: int, rounds: int) -> list:
    """GFLOP/s of the register tile alone (256 steps, every operand in L1), per round."""
    lib = build(target, dict(GOTO=0, PANEL=0, NI2=1, NJ2=1, NC=1, KC=256, PACKA=0), mr, nv)
    flops = 2 * mr * nv * (target.vector_bits // 32) * 256
    reps = max(1, int(2e9 / flops))  # about 2 GFLOP: 20 ms at peak
    out = []
    for _ in range(max(3, rounds // 4)):
        secs = _common.median_seconds(lambda: lib.micro_alone(reps), repeat=3, min_time=0)
        out.append(flops * reps / secs / 1e9)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--isa", choices=["native", "avx2"], default="native")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--register-tile", default="3x4", help="MRxNV: rows x vectors (3x4)")
    ap.add_argument("--json")
    args = ap.parse_args()
    target = _common.avx2_target() if args.isa == "avx2" else Target.create("cpu")
    mr, nv = (int(x) for x in args.register_tile.split("x"))
    lanes = target.vector_bits // 32
    if lanes not in (8, 16):
        raise SystemExit(f"{target}: these models are written for 8 or 16 float32 lanes")
    print(f"CPU: {_common.cpu_name()}; building for {target}; BLAS: {_common.blas_info()}; "
          f"register tile {mr}x{nv} vectors")
    rng = np.random.default_rng(0)
    a, b, c = (rng.uniform(-1, 1, s).astype("float32") for s in ((M, K), (K, N), (M, N)))
    want = a @ b + c
    fns = {}
    for variant in VARIANTS:
        name, defs = macros(variant, mr, lanes * nv)
        if M % (mr * defs["NI2"]) or N % defs["NC"] or defs["NC"] % (lanes * nv):
            print(f"{name}: skipped (the tiles do not divide {M}x{N})")
            continue
        kern = build(target, defs, mr, nv).kern
        out = np.empty((M, N), "float32")
        ptrs = [x.ctypes.data for x in (a, b, c, out)]
        kern(*ptrs)
        np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3 * np.abs(want).max(),
                                   err_msg=name)
        fns[name] = (lambda kern=kern, ptrs=ptrs: kern(*ptrs))
    o = np.empty((M, N), "float32")
    fns["numpy"] = lambda: np.add(np.matmul(a, b, out=o), c, out=o)
    alone = micro_alone_gflops(target, mr, nv, args.rounds)

    times = _common.interleaved_rounds(fns, rounds=args.rounds, repeat=3, min_time=0)
    np_med, np_min = statistics.median(times["numpy"]), min(times["numpy"])
    rows = []
    for k, v in times.items():
        med, low = statistics.median(v), min(v)
        rows.append({"variant": k, "median_ms": med * 1e3, "min_ms": low * 1e3,
                     "vs_numpy_median": np_med / med, "vs_numpy_min": np_min / low,
                     "gflops_min": 2 * M * N * K / low / 1e9})
    print(f"the register tile alone ({mr}x{nv} vectors, 256 steps, operands in L1): "
          f"{statistics.median(alone):.1f} GFLOP/s median, {max(alone):.1f} fastest, of "
          f"{_common.fma_peak_gflops(target):.1f} measured FMA peak")
    _common.print_table(f"matmul_add {M}x{N}x{K}, one thread, {args.rounds} alternated rounds "
                        "(ratios > 1: faster than numpy)", rows, [
                            ("variant", "variant", "{}"), ("median_ms", "median ms", "{:.2f}"),
                            ("vs_numpy_median", "vs numpy", "{:.3f}x"),
                            ("min_ms", "fastest ms", "{:.2f}"),
                            ("vs_numpy_min", "vs numpy", "{:.3f}x"),
                            ("gflops_min", "GFLOP/s", "{:.1f}")])
    _common.write_json(args.json, {"benchmark": "matmul_nests", "cpu": _common.cpu_name(),
                                   "isa": str(target), "blas": _common.blas_info(),
                                   "register_tile": args.register_tile, "rounds": args.rounds,
                                   "register_tile_alone_gflops": alone,
                                   "fma_peak_gflops": _common.fma_peak_gflops(target),
                                   "rows": rows})


if __name__ == "__main__":
    main()
