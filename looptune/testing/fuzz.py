"""Differential schedule fuzzing: random workloads, random valid schedules, and three
answers that must agree - numpy's, the reference interpreter's on the lowered IR, and the
compiled C kernel's (run in a sandbox process).

    python -m looptune.testing.fuzz --count 10000 --seed 0 [--jobs 1] [--save-dir D]

A refused primitive is fine. A wrong answer is a miscompile; an exception other than
ScheduleError, a compiler failure, a kernel that crashes or hangs is a crash. Each failure
is shrunk to a minimal trace and saved as JSON that tests/fuzz/ replays as a regression
test. The last line reads `fuzz: N schedules, M miscompiles, K crashes`; the exit status
is 1 if M or K is not 0."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from ..schedule import Trace
from .check import (Case, Fuzzer, Outcome, case_from_json, case_to_json, generate_case,
                    replay)
from .shrink import shrink
from .workloads import FAMILIES

__all__ = ["Case", "Failure", "Fuzzer", "Outcome", "case_from_json", "case_to_json",
           "fuzz_range", "generate_case", "main", "replay", "run", "shrink_failure"]


# ------------------------------------------------------------------------------ a run
@dataclass
class Failure:
    """A case that failed, its outcome, its shrunk form and where it was saved."""

    case: Case
    outcome: Outcome
    shrunk: Case | None = None
    saved: str | None = None


def fuzz_range(seed: int, start: int, stop: int, *, batch_size: int = 16, families=None,
               fuzzer: Fuzzer | None = None) -> tuple[list, Counter, Counter]:
    """Check schedules #start..stop-1 of the run with `seed`: (failures, applied, refused)."""
    own = fuzzer is None
    fuzzer = fuzzer or Fuzzer()
    failures = []
    try:
        for lo in range(start, stop, batch_size):
            items = [generate_case(seed, i, families, timeout_s=fuzzer.python_timeout_s)
                     for i in range(lo, min(stop, lo + batch_size))]
            for (case, _), out in zip(items, fuzzer.check_generated(items)):
                if out.failed:
                    failures.append(Failure(case, out))
        return failures, fuzzer.applied, fuzzer.refused
    finally:
        if own:
            fuzzer.close()


_job_fuzzer: Fuzzer | None = None  # one per worker process of a --jobs run, kept across chunks


def _range_job(args):
    global _job_fuzzer
    seed, start, stop, batch_size, families = args
    if _job_fuzzer is None:
        _job_fuzzer = Fuzzer()
    _job_fuzzer.applied, _job_fuzzer.refused = Counter(), Counter()
    return fuzz_range(seed, start, stop, batch_size=batch_size, families=families,
                      fuzzer=_job_fuzzer)


def shrink_failure(f: Failure, fuzzer: Fuzzer) -> Case:
    """The failure's case with a minimal trace that fails the same way."""
    def fails(trace: Trace) -> bool:
        out = fuzzer.check(Case(**{**asdict(f.case), "trace": trace.to_json()}))
        return out.kind == f.outcome.kind and out.stage == f.outcome.stage
    if not fails(Trace.from_json(f.case.trace)):
        return f.case  # it does not reproduce on its own (flaky?): keep it whole
    small = Case(**{**asdict(f.case), "trace": shrink(Trace.from_json(f.case.trace),
                                                      fails).to_json()})
    try:  # record it again: lookups then list the outputs they have on this trace
        return Case(**{**asdict(small), "trace": replay(small).trace.to_json()})
    except Exception:
        return small


def run(count: int, seed: int, *, jobs: int = 1, save_dir=None, batch_size: int = 16,
        families=None, fuzzer: Fuzzer | None = None, out=None,
        progress_s: float = 30.0) -> dict:
    """Fuzz `count` schedules; shrink and save each failure; print a report to `out`
    (default stdout). Returns the figures (schedules, miscompiles, crashes, seconds,
    cpu_seconds, failures, ...)."""
    out = out or sys.stdout
    own = fuzzer is None
    fuzzer = fuzzer or Fuzzer()
    t0, cpu0 = time.perf_counter(), _cpu()
    failures: list = []
    applied, refused = Counter(), Counter()
    chunks = [(seed, lo, min(count, lo + batch_size), batch_size, families)
              for lo in range(0, count, batch_size)]
    last = t0

    def note(done, new):
        nonlocal last
        for f in new:  # shrunk and saved at the end; said now, in case the run is cut short
            print(f"  {f.outcome.kind} in stage {f.outcome.stage}: schedule "
                  f"#{f.case.origin.get('index')}", file=out, flush=True)
        if time.perf_counter() - last >= progress_s:
            last = time.perf_counter()
            print(f"  {done}/{count} schedules, {len(failures)} failures, "
                  f"{done / (last - t0):.1f} schedules/s", file=out, flush=True)

    try:
        if jobs <= 1:
            for c in chunks:
                f, a, r = fuzz_range(*c[:3], batch_size=batch_size, families=families,
                                     fuzzer=fuzzer)
                failures += f
                note(c[2], f)
            applied, refused = fuzzer.applied, fuzzer.refused
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
                for c, (f, a, r) in zip(chunks, pool.map(_range_job, chunks)):
                    failures += f
                    applied.update(a)
                    refused.update(r)
                    note(c[2], f)
        seconds, cpu = time.perf_counter() - t0, _cpu() - cpu0
        for f in failures:
            _report_failure(f, fuzzer, save_dir, out)
    finally:
        if own:
            fuzzer.close()
    miscompiles = sum(f.outcome.kind == "miscompile" for f in failures)
    crashes = sum(f.outcome.kind == "crash" for f in failures)
    kinds = sorted(set(applied) | set(refused))
    print("primitives (applied/refused): " + ", ".join(
        f"{k} {applied[k]}/{refused[k]}" for k in kinds), file=out)
    print(f"speed: {count / seconds:.1f} schedules/s ({seconds:.0f} s wall and {cpu:.0f} s CPU "
          f"with the C compiler, {jobs} job(s), shrinking not counted)", file=out)
    print(f"fuzz: {count} schedules, {miscompiles} miscompiles, {crashes} crashes", file=out,
          flush=True)
    return {"schedules": count, "miscompiles": miscompiles, "crashes": crashes,
            "seconds": seconds, "cpu_seconds": cpu, "failures": failures,
            "applied": applied, "refused": refused}


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _report_failure(f: Failure, fuzzer: Fuzzer, save_dir, out) -> None:
    o = f.outcome
    print(f"{o.kind.upper()} in stage {o.stage}: schedule #{f.case.origin.get('index')} of "
          f"{json.dumps(f.case.spec)}\n  {o.message}", file=out, flush=True)
    try:
        f.shrunk = shrink_failure(f, fuzzer)
    except Exception as e:  # the shrinker must not lose the failure
        print(f"  (shrinking failed: {type(e).__name__}: {e})", file=out)
        f.shrunk = f.case
    n0, n1 = len(f.case.trace["insts"]), len(f.shrunk.trace["insts"])
    print(f"  trace shrunk from {n0} to {n1} instructions:", file=out)
    for line in Trace.from_json(f.shrunk.trace).as_python().splitlines():
        print(f"    {line}", file=out)
    if save_dir is not None:
        d = Path(save_dir)
        d.mkdir(parents=True, exist_ok=True)
        origin = f.case.origin
        path = d / f"{o.kind}-{o.stage}-s{origin.get('seed')}-{origin.get('index')}.json"
        path.write_text(json.dumps(case_to_json(f.shrunk, o), indent=1) + "\n")
        f.saved = str(path)
        print(f"  saved to {path} (copy it to tests/fuzz/cases/ as a regression test)", file=out)


def main(argv=None, *, fuzzer: Fuzzer | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m looptune.testing.fuzz",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=200, help="schedules to check (default 200)")
    p.add_argument("--seed", type=int, default=0, help="the run's seed (default 0)")
    p.add_argument("--jobs", type=int, default=1, help="processes (default 1)")
    p.add_argument("--save-dir", default=None, help="where to write failing cases as JSON")
    p.add_argument("--batch", type=int, default=16, help="kernels per shared library")
    p.add_argument("--families", default=None,
                   help=f"workload families, comma-separated (default all: {', '.join(FAMILIES)})")
    args = p.parse_args(argv)
    if args.count < 1 or args.jobs < 1 or args.batch < 1:
        p.error("--count, --jobs and --batch must be at least 1")
    families = None if args.families is None else args.families.split(",")
    unknown = sorted(set(families or ()) - set(FAMILIES))
    if unknown:
        p.error(f"unknown workload families {', '.join(unknown)}; known: {', '.join(FAMILIES)}")
    res = run(args.count, args.seed, jobs=args.jobs, save_dir=args.save_dir,
              batch_size=args.batch, families=families, fuzzer=fuzzer)
    return 1 if res["miscompiles"] or res["crashes"] else 0


if __name__ == "__main__":
    sys.exit(main())
