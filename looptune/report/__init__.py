"""Reports on tuning databases: for every task, best-so-far curves against trials and wall
time (one line per run or strategy), a histogram of measured latencies, trials to 90/95/99%
of the best, and the best schedule as code; as text, a PNG, or a self-contained HTML page.
Pictures need matplotlib (pip install 'looptune[plot]')."""
from __future__ import annotations

from .data import (FRACTIONS, Run, TaskReport, best_so_far, collect, strategy_curve,
                   trials_to_fraction)
from .html import render, write_html
from .plot import report_figure, require_matplotlib, task_figure, write_png
from .text import summary

__all__ = ["FRACTIONS", "Run", "TaskReport", "best_so_far", "collect", "render", "report",
           "report_figure", "require_matplotlib", "strategy_curve", "summary", "task_figure",
           "trials_to_fraction", "write_html", "write_png"]


def report(database, *, html=None, png=None, group: str = "auto", title: str | None = None) -> list:
    """Collect the tasks of `database` (a Database or a work dir) and write the pages asked
    for: `html` (a self-contained page) and/or `png` (every task's panels). `group`: one line
    per "run", per "strategy" (median over its runs), or "auto" (per strategy past
    8 runs). Returns the TaskReports."""
    from ..tune.database.base import Database
    source = str(getattr(database, "path", None) or getattr(database, "work_dir", None)
                 or ("a database" if isinstance(database, Database) else database))
    if not isinstance(database, Database):
        from ..tune.database.work_dir import open_work_dir
        database = open_work_dir(database)
    tasks = collect(database)
    if html is not None or png is not None:
        require_matplotlib()
    if png is not None:
        write_png(tasks, png, group=group)
    if html is not None:
        write_html(tasks, html, title=title or f"looptune report: {source}", source=source,
                   group=group)
    return tasks
