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


def fresh_kernel_cache() -> str:
    """Compile into a new, empty kernel cache, so that tuning time counts every compile (a
    cache kept from an earlier run with the same seed would make trials look cheap)."""
    import tempfile
    d = tempfile.mkdtemp(prefix="looptune-bench-cache-")
    os.environ["LOOPTUNE_CACHE_DIR"] = d
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
