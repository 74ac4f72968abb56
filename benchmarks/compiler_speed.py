"""How fast the compiler itself is, in Python: the search replays and lowers thousands of
schedules per minute. matmul 1024 with a typical tiled schedule (~25 traced instructions).

Reports the median over repeats of: creating the PrimFunc, replaying the trace on a fresh
schedule, lowering, rendering C, and the C compiler's own time (for reference).
Targets: replay <= 5 ms, lowering + rendering <= 10 ms.

    python benchmarks/compiler_speed.py [--repeat 50] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from looptune import te
from looptune.backend import Backend, Source
from looptune.schedule import Schedule, Trace


def matmul(n: int):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis(n, "k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def tiled_schedule(func, seed=0) -> Schedule:
    """A multi-level tiling as the auto-scheduler makes it (SSRSRS), 25 instructions."""
    sch = Schedule(func, seed=seed)
    root = sch.get_block("root")
    b = sch.get_block("C")
    sch.get_producers(b)  # lookups the rules make
    sch.get_consumers(b)
    i, j, k = sch.get_loops(b)
    i_t = sch.sample_perfect_tile(i, 4, 16)
    j_t = sch.sample_perfect_tile(j, 4, 16)
    k_t = sch.sample_perfect_tile(k, 2, 16)
    i0, i1, i2, i3 = sch.split(i, i_t)
    j0, j1, j2, j3 = sch.split(j, j_t)
    k0, k1 = sch.split(k, k_t)
    sch.reorder(i0, j0, i1, j1, k0, i2, j2, k1, i3, j3)
    f = sch.fuse(i0, j0)
    sch.parallel(f)
    sch.vectorize(j3)
    unroll = sch.sample_categorical([0, 16, 64, 512], [0.25] * 4)
    explicit = sch.sample_categorical([0, 1], [0.5, 0.5])
    sch.annotate(root, "pragma_auto_unroll_max_step", unroll)
    sch.annotate(root, "pragma_unroll_explicit", explicit)
    loops = sch.get_loops(b)
    sch.unroll(loops[-2])
    sch.annotate(loops[1], "note", "inner tile")
    sch.unannotate(loops[1], "note")
    return sch


def timeit(fn, repeat: int) -> float:
    fn()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args()

    func = matmul(1024)
    sch = tiled_schedule(func)
    trace = Trace.from_json(sch.trace.to_json())
    backend = Backend.for_target("cpu")  # what a trial's build does, step by step
    lowered = backend.lower(sch.func)
    source = backend.render(sch.func, lowered)

    def replay():
        trace.apply_to_schedule(Schedule(func, seed=0))

    def cc():  # an object, then the library linked from it
        backend.compile(Source(source.func, source.text + f"\n// {time.perf_counter_ns()}\n",
                               source.symbol))

    rows = {
        "create_prim_func": timeit(lambda: matmul(1024), args.repeat),
        "trace_replay": timeit(replay, args.repeat),
        "lower": timeit(lambda: backend.lower(sch.func), args.repeat),
        "render_c": timeit(lambda: backend.render(sch.func, lowered), args.repeat),
        "c_compiler": timeit(cc, max(3, args.repeat // 10)),
    }
    rows["lower_plus_render"] = rows["lower"] + rows["render_c"]
    print(f"matmul 1024, trace of {len(sch.trace)} instructions, median of {args.repeat} runs")
    print(f"{'step':<20}{'ms':>10}{'target':>10}")
    targets = {"trace_replay": 5.0, "lower_plus_render": 10.0}
    for name, ms in rows.items():
        tgt = targets.get(name)
        mark = "" if tgt is None else (f"<= {tgt:g}" + (" ok" if ms <= tgt else " MISSED"))
        print(f"{name:<20}{ms:>10.3f}{mark:>10}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "compiler_speed", "trace_len": len(sch.trace),
                       "ms": rows, "targets_ms": targets}, f, indent=2)


if __name__ == "__main__":
    main()
