"""`looptune report WORK_DIR`: what a tuning database holds, per task: best-so-far curves,
latencies, trials to 90/95/99% of the best, the best schedule; as text, PNG or HTML."""
from __future__ import annotations

from .db import open_database
from .tune import CLIError


def run(args) -> int:
    from ..report import collect, require_matplotlib, summary, write_html, write_png
    db = open_database(args.work_dir)
    tasks = collect(db)
    print(summary(tasks, args.by))
    if args.html or args.png:
        try:
            require_matplotlib()
        except ImportError as e:
            raise CLIError(str(e)) from None
    if args.png:
        write_png(tasks, args.png, group=args.by)
        print(f"wrote {args.png}")
    if args.html:
        write_html(tasks, args.html, title=f"looptune report: {args.work_dir}",
                   source=str(args.work_dir), group=args.by)
        print(f"wrote {args.html}")
    return 0
