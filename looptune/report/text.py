"""The report as rows and plain text: one summary per task, and its runs or strategies with
their trials to 90/95/99% of the best (shared by the terminal and the HTML page)."""
from __future__ import annotations

import math
import statistics

from ..target.machine import describe
from ..text import printable
from .data import FRACTIONS, machine_of, per_strategy, settings_text
from .plot import unit


def fmt_secs(secs: float) -> str:
    """"1.234 ms", "56.7 us", "2.5 s"; "-" for no time."""
    if not math.isfinite(secs):
        return "-"
    name, per = unit(secs)
    return f"{secs / per:.4g} {name}"


def fmt_trials(n) -> str:
    return "never" if n is None else f"{n:g}"


def facts(task) -> list:
    """(label, value) rows describing a task."""
    best = task.best
    errors = ", ".join(f"{k} {n}" for k, n in task.errors.most_common()) or "none"
    rows = [("workload", f"{task.workload.name} (key {task.workload.key})"),
            ("target", str(task.target)),
            ("measured with", settings_text(task.settings)),
            ("measured on", describe(machine_of(task.records[-1]))),
            ("trials", f"{len(task.records)} in {len(task.runs)} run(s), {len(task.ok)} ok"),
            ("errors", errors),
            ("best", fmt_secs(task.best_secs))]
    if best is not None and task.flops:
        rows.append(("best throughput", f"{task.flops / best.median_secs / 1e9:.2f} GFLOP/s"))
    return rows


def run_rows(task, group: str = "auto") -> tuple:
    """(header, rows) of the runs table, or of the strategies table when grouped."""
    pct = [f"to {round(x * 100)}%" for x in FRACTIONS]
    if per_strategy(task, group):
        header = ["strategy", "runs", "median best", *pct]
        rows = []
        for name, runs in task.strategies().items():
            med_best = statistics.median(r.curve()[-1] for r in runs)
            to = task.strategy_trials_to(runs)
            rows.append([name, str(len(runs)), fmt_secs(med_best),
                         *(f"{fmt_trials(to[x][0])} ({to[x][1]}/{len(runs)})" for x in FRACTIONS)])
        return header, rows
    header = ["run", "trials", "best", *pct]
    rows = []
    for run in task.runs:
        to = task.trials_to(run)
        rows.append([run.label, str(len(run.records)), fmt_secs(run.curve()[-1]),
                     *(fmt_trials(to[x]) for x in FRACTIONS)])
    return header, rows


def best_code(task) -> str:
    """The best schedule as Python (the trace, dead lookups dropped), with a header."""
    best = task.best
    if best is None:
        return "# no successful record"
    return (f"# {printable(task.name)}: {fmt_secs(best.median_secs)} on {best.target}\n"
            f"# sch = looptune.Schedule(func)  (func: workload {task.workload.key})\n"
            + best.trace.simplified().as_python())


def summary(tasks, group: str = "auto") -> str:
    """Plain text for the terminal: names and messages from the database have their control
    characters escaped (text.printable)."""
    if not tasks:
        return "the database holds no records"
    out = []
    for task in tasks:
        out.append(printable(task.name))
        out.extend(f"  {k:<16}{printable(v)}" for k, v in facts(task))
        header, rows = run_rows(task, group)
        rows = [[printable(c) for c in r] for r in rows]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        for r in [header, *rows]:
            out.append("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                        for i, (c, w) in enumerate(zip(r, widths))))
        out.append("")
    out.append("trials to X%: the first trial at which a run's best-so-far time is within "
               "best / X of the best any run found")
    return "\n".join(out)
