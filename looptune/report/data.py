"""What a report shows, computed from tuning records (pure Python: plot.py and html.py draw
it). A task is one workload on one target measured with one set of comparable settings; a
run is the records one tune call made for it (`measure["run"]`, written by the task
scheduler), in the order they were measured."""
from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from ..target.machine import describe, machine_fingerprint
from ..tune.database.base import COMPARABLE_SETTINGS, TuningRecord, measure_settings

FRACTIONS = (0.9, 0.95, 0.99)
MAX_RUN_LINES = 8    # group="auto": a task with more runs is shown per strategy
UNKNOWN = "unknown"  # the strategy of records written before runs were recorded


def best_so_far(secs) -> list:
    """The running minimum of per-trial times (failures are infinity)."""
    out, best = [], math.inf
    for s in secs:
        best = min(best, s)
        out.append(best)
    return out


def trials_to_fraction(curve, best_secs: float | None = None, fractions=FRACTIONS) -> dict:
    """{fraction X: the first trial n (1-based, failed trials count) at which the best-so-far
    time `curve[n - 1]` is at most best_secs / X, i.e. the best-so-far throughput is at least
    X times the best throughput; None if never}. `best_secs`: by default the curve's own
    final best; a report passes the best any run of the task found."""
    if best_secs is None:
        best_secs = curve[-1] if curve else math.inf
    out = {}
    for x in fractions:
        limit = best_secs / x
        out[x] = next((i + 1 for i, s in enumerate(curve) if s <= limit), None) \
            if math.isfinite(best_secs) else None
    return out


@dataclass(eq=False)
class Run:
    """The records one tuning run made for one task, in measurement order."""
    id: str | None
    strategy: str
    seed: int | None
    start: float | None            # time.time() when the run began (None: not recorded)
    records: list = field(default_factory=list)
    prior: int = 0                 # the task's trials in the database before this run
    prior_best: float = math.inf   # and their best time: a resumed run goes on from there

    @property
    def simulated(self) -> bool:
        return any(r.measure.get("simulated") for r in self.records)

    @property
    def label(self) -> str:
        if self.id is None:
            return "earlier records (run not recorded)"
        seed = "" if self.seed is None else f" seed {self.seed}"
        resumed = f" (resumed after {self.prior} trials)" if self.prior else ""
        return f"{self.strategy}{seed}" + (" (simulated)" if self.simulated else "") + resumed

    def curve(self) -> list:
        """Best-so-far seconds after each of its trials (from the earlier runs' best, when
        it resumed)."""
        return best_so_far([self.prior_best] + [r.median_secs for r in self.records])[1:]

    def trial_numbers(self) -> range:
        """The task's trial number of each record: a resumed run's first is prior + 1."""
        return range(self.prior + 1, self.prior + len(self.records) + 1)

    def elapsed(self) -> list:
        """Wall seconds from the run's start (or its first record) to each record."""
        t0 = self.start if self.start is not None else self.records[0].time
        return [max(0.0, r.time - t0) for r in self.records]


@dataclass(eq=False)
class TaskReport:
    """One task of a report: its records in commit order, grouped into runs, and the best of
    them."""

    name: str
    workload: object               # Workload
    target: object                 # Target
    settings: dict                 # the comparable measurement settings of every record
    records: list                  # in commit order
    runs: list                     # Run, in order of first record
    flops: float = 0.0

    @property
    def ok(self) -> list:
        return [r for r in self.records if r.ok]

    @property
    def best(self) -> TuningRecord | None:
        return min(self.ok, key=lambda r: r.median_secs, default=None)

    @property
    def best_secs(self) -> float:
        b = self.best
        return math.inf if b is None else b.median_secs

    @property
    def errors(self) -> Counter:
        return Counter(r.error_class or "failed" for r in self.records if not r.ok)

    @property
    def latencies(self) -> list:
        """Median seconds of every successful record (early-aborted ones are one warm call)."""
        return [r.median_secs for r in self.ok]

    def trials_to(self, run: Run, fractions=FRACTIONS) -> dict:
        """trials_to_fraction of the run against the best time of the task (any run), in
        the task's trial numbers (a resumed run counts the trials before it)."""
        got = trials_to_fraction(run.curve(), self.best_secs, fractions)
        return {x: None if n is None else n + run.prior for x, n in got.items()}

    def strategies(self) -> dict:
        """{strategy: [runs]}, in order of first appearance."""
        out = defaultdict(list)
        for run in self.runs:
            out[run.strategy].append(run)
        return dict(out)

    def strategy_trials_to(self, runs, fractions=FRACTIONS) -> dict:
        """{X: (median trials over the runs, or None if most never got there; runs that got
        there)} against the task's best."""
        per_run = [self.trials_to(r, fractions) for r in runs]
        out = {}
        for x in fractions:
            ns = [t[x] if t[x] is not None else math.inf for t in per_run]
            med = statistics.median(ns) if ns else math.inf
            out[x] = (med if math.isfinite(med) else None, sum(math.isfinite(n) for n in ns))
        return out


def per_strategy(task, group: str = "auto") -> bool:
    """Show one line per strategy (True) or per run (False)? `group`: "run", "strategy",
    or "auto" (per strategy when there are more than MAX_RUN_LINES runs)."""
    if group not in ("auto", "run", "strategy"):
        raise ValueError(f"group must be 'auto', 'run' or 'strategy', got {group!r}")
    return group == "strategy" or (group == "auto" and len(task.runs) > MAX_RUN_LINES)


def strategy_curve(runs) -> tuple:
    """(median, 25th percentile, 75th percentile) best-so-far seconds per trial over the
    runs that reached that trial."""
    curves = [r.curve() for r in runs]
    med, lo, hi = [], [], []
    for i in range(max((len(c) for c in curves), default=0)):
        vals = sorted(c[i] for c in curves if i < len(c))
        med.append(_quantile(vals, 0.5))
        lo.append(_quantile(vals, 0.25))
        hi.append(_quantile(vals, 0.75))
    return med, lo, hi


def _quantile(sorted_vals, q: float) -> float:
    """Linear-interpolated quantile (infinities allowed)."""
    pos = q * (len(sorted_vals) - 1)
    i = int(pos)
    j = min(i + 1, len(sorted_vals) - 1)
    a, b = sorted_vals[i], sorted_vals[j]
    if a == b or pos == i:
        return a
    return a + (b - a) * (pos - i)


def collect(database_or_records) -> list:
    """One TaskReport per (workload, target, comparable settings) in a Database (or a list
    of TuningRecords), in order of first record. Baseline records (the default schedule's
    time) are no trials and are left out."""
    records = database_or_records if isinstance(database_or_records, list) \
        else database_or_records.get_all_tuning_records()
    records = [r for r in records if not r.baseline]
    groups: dict = {}
    for r in records:
        groups.setdefault((r.workload.key, r.target.key(), measure_settings(r.measure)),
                          []).append(r)
    per_workload = Counter(k[0] for k in groups)
    machines = defaultdict(set)  # workload key -> the fingerprint ids that timed it
    for wkey, _, settings in groups:
        machines[wkey].add(dict(settings)["machine"])
    tasks = []
    for (wkey, _, settings), recs in groups.items():
        newest = recs[-1]
        name = (newest.measure.get("run") or {}).get("task") or newest.workload.name
        settings = dict(settings)
        if per_workload[wkey] > 1:  # the same workload on several targets, settings, machines
            machine = machine_of(newest) if len(machines[wkey]) > 1 else None
            name += f" [{newest.target.key()}, {settings_text(settings, machine)}]"
        tasks.append(TaskReport(name, newest.workload, newest.target, settings, recs,
                                _runs(recs), _flops(newest.workload.func)))
    return tasks


def _runs(records) -> list:
    runs: dict = {}
    best = math.inf  # of the records before each run's first
    for r in records:
        info = r.measure.get("run") or {}
        rid = info.get("id")
        if rid not in runs:
            prior = info.get("prior_trials") or 0
            runs[rid] = Run(rid, info.get("strategy") or UNKNOWN, info.get("seed"),
                            info.get("start"), prior=prior,
                            prior_best=best if prior else math.inf)
        runs[rid].records.append(r)
        best = min(best, r.median_secs)
    return list(runs.values())


def _flops(func) -> float:
    from ..tir.analysis import flop_count
    try:
        return float(flop_count(func))
    except Exception:  # noqa: BLE001 - a figure for people; a report never fails on it
        return 0.0


def machine_of(record) -> dict:
    """The fingerprint of the machine that timed a record (target/machine.py): this one's for
    a record written before fingerprints existed."""
    fp = record.measure.get("machine")
    return fp if isinstance(fp, dict) and isinstance(fp.get("id"), str) else machine_fingerprint()


def settings_text(settings: dict, machine: dict | None = None) -> str:
    """The comparable settings for people: "1 thread, warm caches, numpy offsets", and "on"
    the `machine` fingerprint if given (when one workload was timed on several)."""
    parts = []
    for k in COMPARABLE_SETTINGS:
        v = settings.get(k)
        if k == "num_threads":
            parts.append("all cores" if v is None else f"{v} thread" + ("s" if v != 1 else ""))
        elif k == "enable_cpu_cache_flush":
            parts.append("caches flushed" if v else "warm caches")
        elif k == "arg_offsets":
            parts.append("aligned args" if v is None else "numpy offsets")
    if machine is not None:
        parts.append(f"on {describe(machine)}")
    return ", ".join(parts)
