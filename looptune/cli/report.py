"""`looptune report [WORK_DIR ...] [--database URL]`: what tuning databases hold, per task
(the records of several work dirs together, and a server's): best-so-far curves, latencies, trials to 90/95/99%
of the best, the best schedule; as text, PNG or HTML."""
from __future__ import annotations

from .db import open_database
from .tune import CLIError


def run(args) -> int:
    from ..report import collect, require_matplotlib, summary, write_html, write_png
    from ..tune.database.synced import merged
    dirs = args.work_dir if isinstance(args.work_dir, list) else [args.work_dir]
    database = getattr(args, "database", None)
    if not dirs and not database:
        raise CLIError("`looptune report` needs work dirs, or --database URL")
    records = [r for d in dirs for r in open_database(d).get_all_tuning_records()]
    if database:  # the server's records that the work dirs lack
        records = merged(records, open_database(None, database).get_all_tuning_records())
    records.sort(key=lambda r: r.time or 0.0)  # runs in the order they were measured
    tasks = collect(records)
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
        where = ", ".join([str(d) for d in dirs] + ([_shown(database)] if database else []))
        write_html(tasks, args.html, title=f"looptune report: {where}", source=where,
                   group=args.by)
        print(f"wrote {args.html}")
    return 0


def _shown(url: str) -> str:
    """A database URL as it may be printed (no password)."""
    from ..tune.database.url import hide_password
    return hide_password(url)
