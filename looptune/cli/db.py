"""`looptune db list|show|best|stats|push|pull`: look inside a tuning database, count its
records, sync a work dir with a PostgreSQL server."""
from __future__ import annotations

import json
import time
from collections import Counter, defaultdict

from ..text import printable
from .tune import CLIError


def open_database(work_dir, database: str | None = None):
    """The database to read: a work dir's (or an SQLite file), of whichever kind it holds; with
    `database` (--database) a server read after the work dir's database (if it holds one;
    an OrderedUnionDatabase), or the database a sqlite:// URL or path names instead. A missing
    work dir or database is a DatabaseError naming the path (reading never creates one)."""
    from ..tune.database import Database, OrderedUnionDatabase, open_work_dir
    from ..tune.database.url import is_server
    from ..tune.database.work_dir import formats_in
    if database is None:
        return open_work_dir(work_dir)
    if not is_server(database):
        return Database.open(database)
    shared = Database.open(database)
    if work_dir is not None and formats_in(work_dir):
        return OrderedUnionDatabase(open_work_dir(work_dir), shared)
    return shared


def _server(args):
    """The PostgreSQL database of `db push` / `db pull` (--database, required)."""
    from ..tune.database.url import is_server
    if not args.database or not is_server(args.database):
        raise CLIError(f"`looptune db {args.db_cmd}` syncs the work dir with a PostgreSQL "
                       "server: give --database postgresql://user:password@host:5432/dbname")
    from ..tune.database import PostgresDatabase
    return PostgresDatabase(args.database)


def sync(args) -> int:
    """push: send the work dir's records the server lacks; pull: copy the server's records the
    work dir lacks (creating its database if needed). Both idempotent."""
    from ..tune.database import Database, open_work_dir
    from ..tune.database.synced import pull, push
    shared = _server(args)
    if args.db_cmd == "push":
        local = open_work_dir(args.work_dir)
        sent, had = push(local, shared)
        print(f"pushed {sent} record(s) from {printable(args.work_dir)} to "
              f"{shared.server.shown} ({had} were there already)")
    else:
        local = Database.open(args.work_dir, create=True)
        got, had = pull(local, shared)
        print(f"pulled {got} record(s) from {shared.server.shown} into "
              f"{printable(args.work_dir)} ({had} were there already)")
    local.close()
    shared.close()
    return 0


def stats(args) -> int:
    """Record counts of one database (--database, else the work dir's): total, per workload and
    per measuring machine's fingerprint (records without one count as this machine's)."""
    from ..target.machine import describe, machine_fingerprint, machine_id
    from ..tune.database import Database, open_work_dir
    db = Database.open(args.database) if args.database else open_work_dir(args.work_dir)
    records = db.get_all_tuning_records()
    per_workload = Counter(r.workload.key for r in records)
    names = {r.workload.key: r.workload.name for r in records}
    per_machine = Counter(machine_id(r.measure) for r in records)
    here = machine_fingerprint()
    seen = {here["id"]: here}
    for r in records:
        m = r.measure.get("machine")
        if isinstance(m, dict) and isinstance(m.get("id"), str):
            seen.setdefault(m["id"], m)
    db.close()
    if args.json:
        print(json.dumps({"records": len(records), "workloads": len(per_workload),
                          "fingerprints": dict(per_machine.most_common())}))
        return 0
    print(f"{len(records)} record(s) of {len(per_workload)} workload(s) in {db!r}")
    if per_workload:
        print("per workload:")
        for key, n in per_workload.most_common():
            print(f"  {n:>8}  {key[:16]}  {printable(names[key])}")
        print("per measuring machine:")
        for mid, n in per_machine.most_common():
            print(f"  {n:>8}  {printable(describe(seen[mid]))}"
                  + ("  (this machine)" if mid == here["id"] else ""))
    return 0


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
    if args.db_cmd == "stats":
        return stats(args)
    if args.db_cmd in ("push", "pull"):
        return sync(args)
    db = open_database(args.work_dir, args.database)
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
