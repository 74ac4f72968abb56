"""Where a record's time and a user's call part (issue 23, DESIGN contract 9): the best kernel
of a tuned work dir (or of a fresh search), called on the same values in differently placed
memory, the placements alternated round by round so that the machine's drift falls on all:

  record      the record's own measurement protocol again (time_evaluator with its settings)
  user        the arrays as a user makes them (rng.uniform(...).astype("float32"), np.empty)
  copies      np.copy of each of those
  page+OFF    copies starting OFF bytes past a 4 KB page boundary, all arguments alike
              (offset 0 puts every argument at the same page offset: 4K aliasing)
  huge        copies in memory mapped with MADV_HUGEPAGE, starting at a 2 MB boundary
  small       copies in memory mapped with MADV_NOHUGEPAGE (4 KB pages only)

Printed: each placement's median and fastest time per call, against the record's time and
against `user`, and how much of each placement's memory the kernel found in huge pages
(/proc/self/smaps). Times are user calls: `mod(*arrays)` from Python.

    python benchmarks/user_gap.py [--workload matmul_add] [--work-dir DIR | --trials 256]
        [--isa native|avx2] [--rounds 12] [--json out.json]

`--work-dir` takes a work dir kept by tune_kernels.py (`--keep DIR`: DIR/looptune_<name>).
"""
from __future__ import annotations

import argparse
import dataclasses
import mmap
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: E402  (single-threaded BLAS before numpy loads)

import numpy as np  # noqa: E402

from looptune import te  # noqa: E402
from looptune.target import Target  # noqa: E402
from looptune.te.ops import workload  # noqa: E402
from looptune.tune import EvaluatorConfig, compile_tir, tune_tir  # noqa: E402
from looptune.tune.database.work_dir import open_work_dir  # noqa: E402

from tune_kernels import WORKLOADS  # noqa: E402

HUGE = 2 << 20
PAGE = 4096


class Mapped:
    """Private anonymous memory (shared mappings get no transparent huge pages) with a
    huge-page advice, holding copies of arrays."""

    def __init__(self, arrays, huge: bool):
        self.maps, self.arrays = [], []
        for a in arrays:
            m = mmap.mmap(-1, a.nbytes + 2 * HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            m.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE)
            raw = np.frombuffer(m, np.uint8)
            start = (-raw.ctypes.data) % HUGE
            view = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
            view[...] = a
            self.maps.append(m)
            self.arrays.append(view)


def at_page_offset(arrays, offset: int) -> list:
    out = []
    for a in arrays:
        raw = np.empty(a.nbytes + 2 * PAGE, np.uint8)
        start = (-raw.ctypes.data) % PAGE + offset
        view = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
        view[...] = a
        out.append(view)
    return out


def huge_share(arrays) -> float:
    """At most this share of the arrays' bytes lies in huge pages: /proc/self/smaps counts a
    mapping's huge pages but does not say where they lie, so each mapping's are credited to
    the arrays up to the part of it they cover."""
    spans = [(a.ctypes.data, a.ctypes.data + a.nbytes) for a in arrays]
    huge = 0
    lo = hi = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
        elif head == "AnonHugePages:" and lo is not None:
            cover = sum(max(0, min(e, hi) - max(s, lo)) for s, e in spans)
            huge += min(int(line.split()[1]) * 1024, cover)
    return huge / sum(a.nbytes for a in arrays)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="matmul_add", choices=list(WORKLOADS))
    ap.add_argument("--work-dir", default=None, help="a tuned work dir to take the best from")
    ap.add_argument("--trials", type=int, default=256, help="tune this many first (no --work-dir)")
    ap.add_argument("--isa", choices=["native", "avx2"], default="native")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    target = _common.avx2_target() if args.isa == "avx2" else Target.create("cpu")
    op, shape, _, _ = WORKLOADS[args.workload]
    tensors, _, _ = workload(op, **shape)
    func = te.create_prim_func(tensors)
    print(f"CPU: {target.model} ({target}); one thread")
    if args.work_dir:
        db = open_work_dir(args.work_dir)
    else:
        _common.fresh_kernel_cache()
        t0 = time.time()
        db = tune_tir(func, target, tempfile.mkdtemp(prefix="user-gap-"),
                      max_trials_global=args.trials, seed=0,
                      evaluator=EvaluatorConfig(num_threads=1))
        print(f"tuned {args.trials} trials in {time.time() - t0:.0f} s")
    mod = compile_tir(db, func, target)
    record = mod.record.median_secs
    rng = np.random.default_rng(0)
    user = [rng.uniform(-1, 1, t.shape).astype("float32") for t in tensors[:-1]]
    user.append(np.empty(tensors[-1].shape, "float32"))
    known = {f.name for f in dataclasses.fields(EvaluatorConfig)}
    c = EvaluatorConfig.from_json({k: v for k, v in mod.record.measure.items() if k in known})
    protocol = mod.time_evaluator(number=c.number, repeat=c.repeat,
                                  min_repeat_ms=c.min_repeat_ms, arg_offsets=c.arg_offsets,
                                  calls_from=c.calls_from)
    huge, small = Mapped(user, True), Mapped(user, False)
    places = {"user": user, "copies": [a.copy() for a in user],
              "page+0": at_page_offset(user, 0), "page+16": at_page_offset(user, 16),
              "page+1040": at_page_offset(user, 1040), "huge": huge.arrays,
              "small": small.arrays}
    times = {name: [] for name in ["record", *places]}
    names = list(times)
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            if name == "record":
                times[name].append(protocol(*user).median)
            else:
                arrays = places[name]
                times[name].append(_common.median_seconds(lambda: mod(*arrays), repeat=5,
                                                          min_time=0.05))
        print(f"round {r + 1}/{args.rounds}", end="\r", flush=True)
    want = np.asarray(user[-1]).copy()
    for name, arrays in places.items():
        np.testing.assert_allclose(arrays[-1], want, rtol=1e-5, atol=1e-5)
    base = statistics.median(times["user"])
    rows = []
    for name in names:
        med = statistics.median(times[name])
        rows.append({"placement": name, "median_ms": med * 1e3, "min_ms": min(times[name]) * 1e3,
                     "vs_record": med / record - 1, "vs_user": med / base - 1,
                     "huge_pages": huge_share(places[name]) if name in places else None})
    _common.print_table(f"{args.workload}: record {record * 1e3:.4f} ms; {args.rounds} rounds "
                        "alternated", rows,
                        [("placement", "placement"), ("median_ms", "median ms", "{:.4f}"),
                         ("min_ms", "fastest ms", "{:.4f}"), ("vs_record", "vs record", "{:+.1%}"),
                         ("vs_user", "vs user", "{:+.1%}"), ("huge_pages", "huge pages <=",
                                                             "{:.0%}")])
    _common.write_json(args.json, {"benchmark": "user_gap", "cpu": target.model,
                                   "isa": str(target), "workload": args.workload,
                                   "record_ms": record * 1e3, "measure": mod.record.measure,
                                   "rows": rows})


if __name__ == "__main__":
    main()
