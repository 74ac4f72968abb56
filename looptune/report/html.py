"""The report as one self-contained HTML page: every picture inlined as a base64 PNG, the
style inline, no script and nothing fetched."""
from __future__ import annotations

import base64
import html
import time

from ..version import __version__
from .plot import png_bytes, task_figure
from .text import best_code, facts, fmt_secs, run_rows

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1500px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
td, th { padding: 0.2em 0.8em; border-bottom: 1px solid #eee; text-align: left; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
.note { color: #666; font-size: 0.85em; }
"""


def _table(header, rows, numeric_from: int = 1) -> str:
    def cell(tag, i, v):
        cls = ' class="n"' if i >= numeric_from else ""
        return f"<{tag}{cls}>{html.escape(str(v))}</{tag}>"
    head = "".join(cell("th", i, h) for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _img(fig, alt: str) -> str:
    data = base64.b64encode(png_bytes(fig)).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def render(tasks, *, title: str = "looptune report", source: str = "",
           group: str = "auto") -> str:
    """The page as a string."""
    esc = html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{esc(title)}</h1>",
             f"<p class=\"note\">{esc(source)} - looptune {__version__}, "
             f"{time.strftime('%Y-%m-%d %H:%M')}</p>"]
    if not tasks:
        parts.append("<p>The database holds no records.</p></body></html>")
        return "".join(parts)
    index = [[t.name, str(len(t.records)), str(len(t.runs)), fmt_secs(t.best_secs),
              str(sum(t.errors.values()))] for t in tasks]
    parts.append(_table(["task", "trials", "runs", "best", "failed"], index))
    for i, task in enumerate(tasks):
        parts.append(f"<h2 id=\"task-{i}\">{esc(task.name)}</h2>")
        parts.append(_table(["", ""], facts(task), numeric_from=2))
        parts.append(_img(task_figure(task, group), f"{task.name}: best so far and latencies"))
        header, rows = run_rows(task, group)
        parts.append(_table(header, rows))
        parts.append("<p class=\"note\">to X%: the first trial at which the best-so-far time "
                     "is at most best / X, best being the fastest time any run of this task "
                     "found (never: not reached).</p>")
        parts.append(f"<h3>best schedule</h3><pre>{esc(best_code(task))}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(tasks, path, *, title: str = "looptune report", source: str = "",
               group: str = "auto") -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(render(tasks, title=title, source=source, group=group))
