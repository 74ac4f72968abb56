"""Shared by the benchmarks: single-threaded numpy, median timing, a table, JSON output."""
from __future__ import annotations

import json
import os
import platform
import statistics
import time

# single-threaded baselines: set before numpy (OpenBLAS) is imported
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def cpu_name() -> str:
    """The CPU model and the ISA looptune detected on it."""
    from looptune.target import Target
    t = Target.create("cpu")
    return f"{t.model} ({t})" if getattr(t, "model", None) else str(t)


def avx2_target():
    """This machine's Target without AVX-512: 256-bit vectors and 16 vector registers, as on
    an AVX2 CPU (it runs here; only caches and clock stay this machine's)."""
    from looptune.target import Target, TargetError
    from looptune.target.target import narrowed
    try:
        return narrowed(Target.create("cpu"), "avx2")
    except TargetError as e:
        raise SystemExit(f"--isa avx2: {e}") from None


def fresh_kernel_cache() -> str:
    """Compile into a new, empty kernel cache, so that tuning time counts every compile (a
    cache kept from an earlier run with the same seed would make trials look cheap)."""
    import atexit
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="looptune-bench-cache-")
    os.environ["LOOPTUNE_CACHE_DIR"] = d
    atexit.register(shutil.rmtree, d, True)  # a benchmark's kernels take 0.5-1.6 GB
    return d


def blas_info() -> str:
    """numpy's BLAS and the kernel it runs (threadpoolctl, where installed)."""
    try:
        import numpy  # noqa: F401
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (pip install threadpoolctl to see)"
    return ", ".join(f"{i['internal_api']} {i.get('architecture', '?')} x{i['num_threads']}"
                     for i in threadpool_info() if i.get("user_api") == "blas") or "none"


def median_seconds(fn, *, repeat: int = 15, min_time: float = 0.05) -> float:
    """Median over `repeat` timings, each a loop of calls lasting at least `min_time`."""
    fn()
    n = 1
    while True:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - t >= min_time:
            break
        n *= 2
    res = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        res.append((time.perf_counter() - t) / n)
    return statistics.median(res)


def interleaved_rounds(fns: dict, *, rounds: int = 7, repeat: int = 5,
                       min_time: float = 0.05, self_timed=()) -> dict:
    """Each callable's times, one per round, over `rounds` rounds that time every callable in
    turn (median_seconds each), the order reversed every other round: on a shared machine a
    drift then weighs on all of them alike instead of on whichever was timed during it.
    The callables named in `self_timed` return their own time per call instead (a record's
    measurement protocol: time_evaluator(...)(...).median)."""
    times = {k: [] for k in fns}
    for r in range(rounds):
        for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            times[k].append(fns[k]() if k in self_timed else
                            median_seconds(fns[k], repeat=repeat, min_time=min_time))
    return times


def interleaved_seconds(fns: dict, **options) -> dict:
    """Each callable's median over interleaved_rounds(fns, **options)."""
    return {k: statistics.median(v) for k, v in interleaved_rounds(fns, **options).items()}


def module_seconds(mod, args, *, repeat: int = 15, min_repeat_ms: float = 50) -> float:
    return mod.time_evaluator(number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)(*args).median


def print_table(title: str, rows: list[dict], columns: list[tuple[str, str]]):
    print(title)
    widths = [max(len(h), *(len(fmt.format(r[k]) if r.get(k) is not None else "-") for r in rows))
              for k, h, fmt in ((c[0], c[1], c[2] if len(c) > 2 else "{}") for c in columns)]
    print("  ".join(h.ljust(w) for (_, h, *_), w in zip(columns, widths)))
    for r in rows:
        cells = []
        for (k, _, *fmt), w in zip(columns, widths):
            v = r.get(k)
            cells.append(("-" if v is None else (fmt[0] if fmt else "{}").format(v)).ljust(w))
        print("  ".join(cells))


def write_json(path: str | None, payload: dict):
    if not path:
        return
    payload = dict(payload)
    payload.setdefault("machine", {"processor": platform.processor(), "python": platform.python_version()})
    payload.setdefault("time", time.strftime("%Y-%m-%dT%H:%M:%S"))
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
    print(f"wrote {path}")


_PEAK_SOURCE = r"""
#include <stdint.h>
#include <time.h>
typedef float vf __attribute__((vector_size(VBYTES)));
/* GFLOP/s of independent FMA chains on one core: ACC accumulators, enough to cover the
   FMA latency times the FMA units of any x86 core so far. */
double lt_fma_peak(int64_t iters) {
  vf acc[ACC], a, b;
  for (int i = 0; i < (int)(VBYTES / 4); ++i) { a[i] = 1.0f + 1e-7f * i; b[i] = 1e-7f; }
  for (int j = 0; j < ACC; ++j) acc[j] = b * (float)j;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int j = 0; j < ACC; ++j) acc[j] = acc[j] * a + b;
    __asm__ volatile("" : "+x"(a));
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  float sink = 0;
  for (int j = 0; j < ACC; ++j) sink += acc[j][0];
  __asm__ volatile("" : : "x"(sink));
  double secs = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
  return 2.0 * ACC * (VBYTES / 4) * (double)iters / secs / 1e9;
}
"""


def fma_peak_gflops(target=None) -> float:
    """The core's measured float32 FMA peak (GFLOP/s, one thread, at today's clock): the
    best of several runs of independent FMA chains as wide as the Target's vectors, compiled
    for the Target's ISA. Kernels' GFLOP/s are quoted as a fraction of it."""
    import ctypes

    from looptune.backend.cpu import isa_flags
    from looptune.runtime.compiler import compile_shared
    from looptune.target import Target
    target = Target.create(target or "cpu")
    vbytes = max(16, target.vector_bits // 8)
    src = f"#define VBYTES {vbytes}\n#define ACC 12\n" + _PEAK_SOURCE
    flags = ["-O2", "-fPIC", "-shared", *isa_flags(target)]
    lib = ctypes.CDLL(str(compile_shared(src, name="lt_fma_peak", flags=flags)))
    lib.lt_fma_peak.restype = ctypes.c_double
    lib.lt_fma_peak.argtypes = [ctypes.c_int64]
    return max(lib.lt_fma_peak(20_000_000) for _ in range(5))


_DOT_PEAK_SOURCE = r"""
#include <stdint.h>
#include <time.h>
#define X(r) OP " %%" REG SRC_A ", %%" REG SRC_B ", %%" REG #r "\n"
/* Seconds for `iters` rounds of `OP` on 14 independent accumulators held in registers, the
   loop written in assembly: what the unit does at most on one core, today. */
double lt_dot_peak(int64_t iters) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  __asm__ volatile("1:\n" X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
                   X(12) X(13) "dec %0\njnz 1b\n" : "+r"(iters) :
                   : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                     "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
}
"""

# the unit -> (instruction, registers, the two source registers, operations per instruction:
# 2 per multiply-add); VEX encodes registers 0-15 only
DOT_UNITS = {"avx512_vnni": ("vpdpbusd", "zmm", ("30", "31"), 2 * 64),
             "avx_vnni": ("%{vex%} vpdpbusd", "ymm", ("14", "15"), 2 * 32),
             "avx512_bf16": ("vdpbf16ps", "zmm", ("30", "31"), 2 * 32)}


def dot_peak_lib(unit: str, target):
    """The compiled register-only loop of `unit` (_DOT_PEAK_SOURCE): lib.lt_dot_peak(iters)
    returns its seconds; each iteration is 14 * DOT_UNITS[unit][3] operations."""
    import ctypes

    from looptune.backend.cpu import isa_flags
    from looptune.runtime.compiler import compile_shared
    op, reg, (a, b), _ = DOT_UNITS[unit]
    src = (f'#define OP "{op}"\n#define REG "{reg}"\n#define SRC_A "{a}"\n#define SRC_B "{b}"\n'
           + _DOT_PEAK_SOURCE)
    flags = ["-O2", "-fPIC", "-shared", *isa_flags(target)]
    lib = ctypes.CDLL(str(compile_shared(src, name=f"lt_dot_peak_{unit}", flags=flags)))
    lib.lt_dot_peak.restype = ctypes.c_double
    lib.lt_dot_peak.argtypes = [ctypes.c_int64]
    return lib


def dot_peak_gops(unit: str = "avx512_vnni", target=None) -> float | None:
    """The core's measured peak of an int8 or bf16 dot-product unit (GOP/s, one thread, at
    today's clock; None where the Target lacks it): the best of five runs of 14 register-only
    instruction chains (_DOT_PEAK_SOURCE). An int8 GEMM's GOP/s are quoted against it."""
    from looptune.target import Target
    target = Target.create(target or "cpu")
    if not target.has(unit):
        return None
    lib = dot_peak_lib(unit, target)
    iters = 10_000_000
    ops = 14 * DOT_UNITS[unit][3] * iters
    return max(ops / lib.lt_dot_peak(iters) / 1e9 for _ in range(5))
