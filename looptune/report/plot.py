"""Report figures with matplotlib (the optional extra looptune[plot]). Per task, three
panels: best-so-far time against trials and against wall time (one line per run, or per
strategy: the median over its runs with the quartiles shaded), and a histogram of the
measured latencies. Drawn on Figure objects, not pyplot: no backend or global state of
the caller's changes."""
from __future__ import annotations

import io
import math

from .data import per_strategy, strategy_curve


def require_matplotlib():
    """matplotlib's Figure class, or an ImportError that says how to install it."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("looptune reports draw with matplotlib, which is not installed: "
                          "pip install 'looptune[plot]' (or pip install matplotlib)") from None
    return Figure


def unit(secs: float) -> tuple:
    """(name, seconds per unit) that shows `secs` with a few digits before the point."""
    if not math.isfinite(secs) or secs >= 1.0:
        return "s", 1.0
    return ("ms", 1e-3) if secs >= 1e-4 else ("us", 1e-6)


def _scaled(values, per: float) -> list:
    return [v / per if math.isfinite(v) else math.nan for v in values]


def draw_task(axes, task, group: str = "auto") -> None:
    """Draw one task on three Axes: best so far vs trials, vs wall time, latency histogram."""
    ax_n, ax_t, ax_h = axes
    colors = [f"C{i}" for i in range(10)]
    grouped = per_strategy(task, group)
    uname, per = unit(task.best_secs)
    _ms = lambda values: _scaled(values, per)  # noqa: E731
    worst = 0.0
    if grouped:
        for i, (name, runs) in enumerate(task.strategies().items()):
            med, lo, hi = (_ms(c) for c in strategy_curve(runs))
            worst = max([worst, *(v for v in hi if math.isfinite(v))])
            x = range(1, len(med) + 1)
            c = colors[i % 10]
            ax_n.plot(x, med, color=c, drawstyle="steps-post", label=f"{name} (median of {len(runs)})")
            ax_n.fill_between(x, lo, hi, color=c, alpha=0.2, step="post", linewidth=0)
            for run in runs:
                if not run.simulated:
                    ax_t.plot(run.elapsed(), _ms(run.curve()), color=c, alpha=0.5, linewidth=0.8,
                              drawstyle="steps-post")
    else:
        for i, run in enumerate(task.runs):
            c = colors[i % 10]
            curve = _ms(run.curve())
            worst = max([worst, *(v for v in curve if math.isfinite(v))])
            ax_n.plot(run.trial_numbers(), curve, color=c, drawstyle="steps-post",
                      label=run.label)
            if not run.simulated:
                ax_t.plot(run.elapsed(), curve, color=c, drawstyle="steps-post", label=run.label)
    best = task.best_secs / per
    for ax in (ax_n, ax_t):
        if math.isfinite(best):
            ax.axhline(best, color="0.5", linestyle=":", linewidth=1)
            if worst > 20 * best:  # curves spanning decades: log scale
                ax.set_yscale("log")
                _plain_labels(ax.yaxis)
        ax.set_ylabel(f"best so far ({uname})")
        ax.grid(True, which="both", alpha=0.3)
    ax_n.set_title(f"{task.name}: best so far by trial", fontsize=10)
    ax_n.set_xlabel("trial")
    ax_n.legend(fontsize=7, loc="upper right")
    ax_t.set_title("best so far by wall time", fontsize=10)
    ax_t.set_xlabel("seconds since the run started")
    ax_t.set_xlim(left=0)
    if all(run.simulated for run in task.runs):
        ax_t.text(0.5, 0.5, "simulated runs:\nwall time is not modelled", ha="center",
                  va="center", transform=ax_t.transAxes, fontsize=9, color="0.4")
    _histogram(ax_h, task, uname, per)


def _histogram(ax, task, name: str, per: float) -> None:
    lat = [s / per for s in task.latencies]
    ax.set_title(f"measured latencies ({len(lat)} ok, {sum(task.errors.values())} failed)",
                 fontsize=10)
    ax.set_xlabel(f"{name} per call")
    ax.set_ylabel("records")
    if not lat:
        ax.text(0.5, 0.5, "no successful record", ha="center", va="center",
                transform=ax.transAxes, fontsize=9, color="0.4")
        return
    lo, hi = min(lat), max(lat)
    if hi > 1.5 * lo:
        import numpy as np
        bins = np.geomspace(lo, hi, 31)
        ax.set_xscale("log")
        _plain_labels(ax.xaxis)
    else:
        bins = 30
    ax.hist(lat, bins=bins, color="C0", alpha=0.8)
    from matplotlib.ticker import MaxNLocator
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: never "0.5 records"
    ax.axvline(lo, color="C3", linestyle="--", linewidth=1, label=f"best {lo:.4g} {name}")
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)


def _plain_labels(axis) -> None:
    """Label a log axis 0.3, 1, 2 rather than 3x10^-1: the ticks matplotlib labels, as plain
    numbers, minor ones only at 2, 3 and 5 times a power of ten (others crowd)."""
    from matplotlib.ticker import FuncFormatter
    major, minor = axis.get_major_formatter(), axis.get_minor_formatter()
    axis.set_major_formatter(FuncFormatter(lambda v, pos: f"{v:g}" if major(v, pos) else ""))
    axis.set_minor_formatter(FuncFormatter(
        lambda v, pos: f"{v:g}" if minor(v, pos) and f"{v:e}"[0] in "235" else ""))


def task_figure(task, group: str = "auto"):
    """A Figure (15 x 3.8 inches) with the task's three panels."""
    Figure = require_matplotlib()
    fig = Figure(figsize=(15, 3.8), layout="constrained")
    draw_task(fig.subplots(1, 3), task, group)
    return fig


def report_figure(tasks, group: str = "auto"):
    """One Figure for every task, a row of three panels each."""
    Figure = require_matplotlib()
    fig = Figure(figsize=(15, 3.8 * max(1, len(tasks))), layout="constrained")
    if not tasks:
        fig.text(0.5, 0.5, "the database holds no records", ha="center", va="center")
        return fig
    rows = fig.subplots(len(tasks), 3, squeeze=False)
    for task, axes in zip(tasks, rows):
        draw_task(axes, task, group)
    return fig


def png_bytes(fig, dpi: int = 100) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def write_png(tasks, path, *, group: str = "auto", dpi: int = 100) -> None:
    """Every task's panels in one PNG file."""
    with open(path, "wb") as f:
        f.write(png_bytes(report_figure(tasks, group), dpi))
