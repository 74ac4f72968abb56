"""Fault injection during tuning: some candidates of a real tuning run get their C source
edited so that they crash, hang, abort, run out of memory, write NaN or wrong values, or do
not compile. Every fault must become a record with the right error class, the run must
finish, the measurement worker must recover, and the best record must be a correct kernel.

    python -m looptune.testing.faults [--work-dir D]    prints one line per fault

Used by tests/test_faults.py and benchmarks/reliability.py."""
from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
from dataclasses import dataclass, field

from ..backend import written_params
from ..tune.builder import LocalBuilder
from ..tune.runner import EvaluatorConfig, LocalRunner


@dataclass(frozen=True)
class Fault:
    """C put into a kernel (`{out}` stands for its first output), and how its record must read."""

    kind: str
    error_class: str            # the record's error class
    message: str                # a part of the record's error message
    at_start: str = ""          # C run before the kernel's loops
    before_return: str = ""     # C run after them
    prelude: str = ""           # C put at the top of the file (includes)


FAULTS = (
    Fault("segfault", "run_error", "the kernel crashed (signal SIGSEGV)",
          at_start="  *(volatile int*)0 = 0;\n"),
    Fault("hang", "run_timeout", "the kernel hangs",
          at_start="  for (volatile int z = 0;; ) { z++; }\n"),
    Fault("abort", "run_error", "the kernel crashed (signal SIGABRT)", at_start="  abort();\n"),
    # an allocation that fails, handled as generated code handles it (codegen: allocate)
    Fault("out_of_memory", "run_error", "failed with status -1 (out of memory?)",
          at_start="  void* volatile lt_huge = lt_alloc((size_t)1 << 62);\n"
                   "  if (lt_huge == NULL) return -1;\n  free(lt_huge);\n"),
    # what the kernel's OOM killer does to a process that takes too much memory
    Fault("oom_killed", "run_error", "(signal SIGKILL) (out of memory?)",
          prelude="#include <signal.h>\n#include <unistd.h>\n",
          at_start="  kill(getpid(), SIGKILL);\n"),
    Fault("nan", "wrong_result", "are NaN", before_return="  {out}[0] = NAN;\n"),
    Fault("wrong", "wrong_result", "differ from the reference",
          before_return="  {out}[1] += 1.0f;\n"),
    Fault("compile_error", "build_error", "the C compiler failed",
          at_start="  this is not C;\n"),
)
WORKER_KILLING = ("segfault", "hang", "abort", "oom_killed")  # the worker is replaced after these


def patch_kernel(source: str, symbol: str, *, at_start: str = "", before_return: str = "",
                 replace: tuple = (), prelude: str = "") -> str:
    """`source` with the body of kernel `symbol` edited: `at_start` before its statements,
    `before_return` after them, each (old, new) of `replace` applied once inside it."""
    head = source.index(f"int32_t {symbol}(")
    body = source.index("{\n", head) + 2
    ret = source.index("  return 0;\n}", body)
    kernel = source[body:ret]
    for old, new in replace:
        if old not in kernel:
            raise ValueError(f"{old!r} is not in the body of {symbol}")
        kernel = kernel.replace(old, new, 1)
    return prelude + source[:body] + at_start + kernel + before_return + source[ret:]


def inject(fault: Fault, source: str, symbol: str, func) -> str:
    """`source` (the C of the scheduled `func`, kernel `symbol`) with `fault` in it."""
    head = source.index(f"int32_t {symbol}(") + len(f"int32_t {symbol}(")
    names = [p.split()[-1] for p in source[head:source.index(")", head)].split(",")]
    written = written_params(func)
    out = next(n for n, b in zip(names, func.params) if b in written)
    return patch_kernel(source, symbol, at_start=fault.at_start.replace("{out}", out),
                        before_return=fault.before_return.replace("{out}", out),
                        prelude=f"// injected fault: {fault.kind}\n{fault.prelude}")


class FaultyBuilder(LocalBuilder):
    """A LocalBuilder that puts the next of `faults` into every `every`-th candidate it
    renders (the unscheduled reference is left alone) until each was injected once.
    `injected` maps the sha256 of each faulty source to its Fault."""

    def __init__(self, faults=FAULTS, *, every: int = 2, **kwargs):
        super().__init__(**kwargs)
        self.pending = list(faults)
        self.every = every
        self.rendered = 0
        self.injected: dict = {}

    def render(self, inp):
        symbol, source = super().render(inp)
        if inp.meta.get("trace") == "unscheduled" or not self.pending:
            return symbol, source
        self.rendered += 1
        if self.rendered % self.every:
            return symbol, source
        fault = self.pending.pop(0)
        source = inject(fault, source, symbol, inp.func)
        self.injected[hashlib.sha256(source.encode()).hexdigest()] = fault
        return symbol, source


class TrackingRunner(LocalRunner):
    """A LocalRunner that remembers the pid of every measurement worker it starts."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.pids: list = []

    def _live_worker(self):
        w = super()._live_worker()
        if not self.pids or self.pids[-1] != w.proc.pid:
            self.pids.append(w.proc.pid)
        return w


def child_alive(pid: int) -> bool:
    """Is `pid` still a child of this process (running, or a zombie nobody reaped)?"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return False
    return ppid == os.getpid()


@dataclass
class Outcome:
    """One injected fault as the database recorded it."""

    kind: str
    expected: str
    error_class: str | None
    error_msg: str | None
    classified: bool            # the expected class, and a message that says what happened


@dataclass
class FaultReport:
    """What a fault-injection run found: one outcome per injected fault, and whether the run and
    its best record stayed sound."""

    outcomes: list = field(default_factory=list)  # one Outcome per injected fault, in order
    not_measured: list = field(default_factory=list)  # kinds the budget did not reach
    good: int = 0               # records of candidates without a fault that were measured
    unexpected: list = field(default_factory=list)  # error messages of candidates without one
    workers_started: int = 0
    workers_left: int = 0       # measurement workers still alive after the run
    best_ok: bool = False       # the best record builds, verifies and carries no fault
    best_msg: str = ""

    @property
    def classified(self) -> int:
        return sum(o.classified for o in self.outcomes)


def matmul_func():
    from .. import te
    from ..te.ops import workload
    return te.create_prim_func(workload("matmul", M=24, N=32, K=16)[0])


def tune_with_faults(work_dir, *, faults=FAULTS, trials: int | None = None, seed: int = 0,
                     timeout_s: float = 5.0) -> FaultReport:
    """Tune a small matmul in `work_dir` with every other candidate given one of `faults`
    (by default 2 * len(faults) + 4 trials, batches of 4); what the database recorded."""
    import warnings

    from ..tune import compile_tir, tune_tir
    func = matmul_func()
    builder = FaultyBuilder(faults)
    runner = TrackingRunner(timeout_s=timeout_s)
    db = tune_tir(func, "cpu", str(work_dir), max_trials_global=trials or 2 * len(faults) + 4,
                  num_trials_per_iter=4, seed=seed, builder=builder, runner=runner,
                  evaluator=EvaluatorConfig(num_threads=1, repeat=2, min_repeat_ms=1),
                  progress=False)
    report = FaultReport(workers_started=len(runner.pids),
                         workers_left=sum(child_alive(p) for p in runner.pids))
    recorded = set()
    for rec in db.get_all_tuning_records():
        fault = builder.injected.get(rec.measure.get("source_hash"))
        if fault is None:
            if rec.ok:
                report.good += 1
            else:
                report.unexpected.append(f"{rec.error_class}: {rec.error_msg}")
            continue
        recorded.add(fault.kind)
        report.outcomes.append(Outcome(
            fault.kind, fault.error_class, rec.error_class, rec.error_msg,
            rec.error_class == fault.error_class and rec.run_secs is None
            and fault.message in (rec.error_msg or "")))
    report.not_measured = [f.kind for f in faults if f.kind not in recorded]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a skipped record is reported below as a failure
            mod = compile_tir(db, func, check=True)
        faulty = mod.record.measure.get("source_hash") in builder.injected
        report.best_ok = not faulty
        report.best_msg = (f"{mod.record.median_secs * 1e6:.2f} us" if not faulty
                           else "the best record is a faulty kernel")
    except Exception as e:  # noqa: BLE001 - reported: no correct record to compile
        report.best_msg = f"{type(e).__name__}: {e}"
    db.close()
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work-dir", default=None, help="default: a new temporary directory")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    work = args.work_dir or tempfile.mkdtemp(prefix="looptune-faults-")
    r = tune_with_faults(work, seed=args.seed)
    for o in r.outcomes:
        print(f"{o.kind:<14} {'ok' if o.classified else 'WRONG':<6} {o.error_class}: "
              f"{(o.error_msg or '').splitlines()[0][:90]}")
    print(f"good candidates measured: {r.good}; unexpected failures: {len(r.unexpected)}; "
          f"workers started: {r.workers_started}, left alive: {r.workers_left}; "
          f"best: {r.best_msg}")
    print(f"faults: {len(r.outcomes)} injected, {len({o.kind for o in r.outcomes})} kinds, "
          f"{r.classified} classified")
    ok = (r.classified == len(r.outcomes) == len(FAULTS) and r.best_ok and not r.workers_left)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
