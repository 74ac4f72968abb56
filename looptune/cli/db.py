"""`looptune db list|show|best`: look inside a tuning database."""
from __future__ import annotations

import time
from collections import defaultdict

from ..text import printable
from .tune import CLIError


def open_database(work_dir: str):
    """The database of a work dir (or an SQLite file), of whichever kind it holds; a missing
    work dir or database is a CLIError naming the path (reading never creates one)."""
    from ..tune.database import open_work_dir
    return open_work_dir(work_dir)


def _groups(db):
    by_key = defaultdict(list)
    for r in db.get_all_tuning_records():
        by_key[r.workload.key].append(r)
    return by_key


def _find(db, spec: str):
    groups = _groups(db)
    hits = [k for k, recs in groups.items() if k.startswith(spec) or recs[0].workload.name == spec]
    if not hits:
        names = ", ".join(sorted({printable(recs[0].workload.name)
                                  for recs in groups.values()})) or "none"
        raise CLIError(f"no workload {spec!r} in the database (workloads: {names}); give a name "
                       "or a key prefix from `looptune db list`")
    if len(hits) > 1:
        raise CLIError(f"{spec!r} matches {len(hits)} workloads ({', '.join(hits)}); give a key "
                       "prefix from `looptune db list`")
    return groups[hits[0]]


def _ms(r) -> str:
    return f"{r.median_secs * 1e3:.4f} ms" if r.ok else f"failed ({r.error_class})"


def run(args) -> int:
    db = open_database(args.work_dir)
    if args.db_cmd == "list":
        groups = _groups(db)
        if not groups:
            print("the database holds no records")
            return 0
        print(f"{'key':<18}{'workload':<20}{'records':>8}{'failed':>8}  best")
        for key, recs in groups.items():
            ok = [r for r in recs if r.ok]
            best = f"{min(r.median_secs for r in ok) * 1e3:.4f} ms" if ok else "-"
            print(f"{key:<18}{printable(recs[0].workload.name):<20}{len(recs):>8}{len(recs) - len(ok):>8}  {best}")
        return 0
    recs = _find(db, args.workload)
    if args.db_cmd == "show":
        recs = sorted(recs, key=lambda r: r.time)
        for i, r in enumerate(recs[-args.limit:]):
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.time))
            line = f"{i:>4}  {when}  {_ms(r):<24} {len(r.trace)} instructions  {r.target.key()}"
            if not r.ok and r.error_msg:
                line += "\n      " + printable(r.error_msg.strip().splitlines()[0][:160])
            print(line)
        return 0
    ok = sorted((r for r in recs if r.ok), key=lambda r: r.median_secs)
    if not ok:
        raise CLIError(f"{printable(recs[0].workload.name)} has no successful record")
    best = ok[0]
    print(f"# {printable(best.workload.name)}: {_ms(best)} on {best.target}; "
          f"measured with {printable(best.measure)}")
    print(best.trace.simplified().as_python())
    return 0
