"""The PostgreSQL team database against a real server the tests start (tests/pg_server.py):
records round-trip as SQLite's do, upserts store a trial once, old schemas migrate, each bad
URL / password / server / database name gets its own clear error, `db stats`, `db push` and
`db pull` count right, and a synced work dir carries on when the server goes away."""
from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import warnings

import pytest

from looptune.cli import main
from looptune.target.machine import describe, machine_fingerprint
from looptune.tune.database import (Database, OrderedUnionDatabase, PostgresDatabase,
                                    SQLiteDatabase, SyncedDatabase, TuningRecord, record_key)
from looptune.tune.database.postgres import MIGRATIONS, SCHEMA_VERSION
from looptune.tune.error import DatabaseError, DatabaseWarning, ServerUnreachableError
from pg_server import PASSWORD, free_port
from test_database import HOST, OTHER, make_records, mm_func

OTHER_MACHINE = {"id": "0123456789abcdef", "cpu": "Some Other CPU", "isa": ["avx2", "fma"],
                 "cores": 64, "gpu": []}


def as_json(records) -> list:
    return [r.to_json() for r in records]


def records_of_two_workloads(db, seed=0):
    rng = random.Random(seed)
    a, b = db.commit_workload(mm_func()), db.commit_workload(mm_func(8, 12, 5))
    return make_records(a, rng) + make_records(b, rng, 4, 2, target=OTHER)


def test_records_round_trip_and_rank_as_in_sqlite(pg_url, tmp_path):
    pg, lite = Database.open(pg_url), SQLiteDatabase(work_dir=tmp_path / "w")
    recs = records_of_two_workloads(Database.create("memory"))
    for db in (pg, lite):
        for r in recs:
            db.commit_tuning_record(r)
    other = PostgresDatabase(pg_url)  # another tuner's connection sees every commit
    for db in (pg, other):
        assert as_json(db.get_all_tuning_records()) == as_json(lite.get_all_tuning_records())
        assert len(db) == len(lite) == 15
        for func in (mm_func(), mm_func(8, 12, 5)):
            assert db.has_workload(func)
            for target in (HOST, OTHER):
                assert as_json(db.query_tuning_record(func, target, k=3)) == \
                    as_json(lite.query_tuning_record(func, target, k=3))
                assert as_json(db.get_top_k(db.key_of(func), 4, target)) == \
                    as_json(lite.get_top_k(lite.key_of(func), 4, target))
        sch, want = db.query_schedule(mm_func(), HOST), lite.query_schedule(mm_func(), HOST)
        assert sch.trace.to_json() == want.trace.to_json()
        assert not db.has_workload(mm_func(5, 5, 5))
    assert pg.schema_version() == SCHEMA_VERSION


def test_upserts_store_a_trial_once(pg_url, tmp_path):
    db = PostgresDatabase(pg_url)
    recs = records_of_two_workloads(db, seed=1)
    assert db.commit_records(recs) == len(recs)
    assert db.commit_records(recs) == 0  # a restarted tuner sending them again
    for r in recs[:3]:
        db.commit_tuning_record(r)
    # two writers sending the same records at once (separate connections): each stored once
    writers = [PostgresDatabase(pg_url) for _ in range(2)]
    more = records_of_two_workloads(writers[0], seed=2)
    threads = [threading.Thread(target=w.commit_records, args=(more,)) for w in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(db) == len(recs) + len(more)
    assert sorted(record_key(r) for r in db.get_all_tuning_records()) == \
        sorted(record_key(r) for r in recs + more)
    # the same schedule timed on another kind of machine, or with other settings, is another
    # trial; timed again alike (new times) it is the same one
    r = recs[0]
    elsewhere = TuningRecord(r.workload, r.trace, (2.5e-3,), r.target,
                             measure={**r.measure, "machine": OTHER_MACHINE})
    threads2 = TuningRecord(r.workload, r.trace, (2.5e-3,), r.target,
                            measure={**r.measure, "num_threads": 2})
    again = TuningRecord(r.workload, r.trace, (9.9e-3,), r.target, measure=dict(r.measure))
    assert db.commit_records([elsewhere, threads2, again]) == 2
    assert len(db) == len(recs) + len(more) + 2


def test_an_older_schema_is_migrated_and_a_newer_one_refused(postgres, pg_url):
    import psycopg
    lite = Database.create("memory")
    recs = records_of_two_workloads(lite, seed=3)
    with psycopg.connect(pg_url, autocommit=True) as conn:  # a database left at version 1
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (1)")
        for sql in MIGRATIONS[0]:
            conn.execute(sql)
        for wl in {r.workload.key: r.workload for r in recs}.values():
            conn.execute("INSERT INTO workloads (key, name, func) VALUES (%s, %s, %s)",
                         (wl.key, wl.name, json.dumps(wl.to_json()["func"])))
        for r in recs:
            conn.execute("INSERT INTO records (key, workload, target, median_secs, error_class, "
                         "time, record) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                         (record_key(r), r.workload.key, r.target.key(), None, r.error_class,
                          r.time, json.dumps(r.to_json())))
    db = PostgresDatabase(pg_url)
    assert db.schema_version() == SCHEMA_VERSION == 2
    assert as_json(db.get_all_tuning_records()) == as_json(recs)
    dbname = pg_url.rsplit("/", 1)[1]
    rows = postgres.sql("SELECT count(*) FROM records WHERE machine IS NULL", dbname)
    assert rows == [(len(recs),)]  # filled from each record's measure (none name a machine)
    db.close()
    postgres.sql("UPDATE schema_version SET version = 99", dbname)
    with pytest.raises(DatabaseError, match="schema version 99 is newer than 2"):
        PostgresDatabase(pg_url)


def test_each_connection_failure_says_which_one_it_is(postgres, pg_url):
    bad_password = pg_url.replace(PASSWORD, "wrong-pw-123")
    cases = {
        "mysql://u:pw@h/db": "unknown kind of database URL",
        "postgresql://u:pw@h:99999/db": "bad PostgreSQL URL",
        "postgresql://u:pw@h:port/db": "bad PostgreSQL URL",
        pg_url.rsplit("/", 1)[0]: "names no database",
        bad_password: "refused the credentials of user 'looptune_test'",
        postgres.url("no_such_db"): "has no database 'no_such_db'",
        postgres.url("x", port=free_port()): "refused the connection",
    }
    for url, want in cases.items():
        with pytest.raises(DatabaseError, match=want) as err:
            Database.open(url)
        for secret in ("wrong-pw-123", PASSWORD, ":pw@"):
            assert secret not in str(err.value), str(err.value)
    with pytest.raises(ServerUnreachableError):
        Database.open(postgres.url("x", port=free_port()))
    # the command line prints the same, as an error (exit 2) without a traceback
    assert main(["db", "stats", "--database", bad_password]) == 2


def test_looptune_imports_and_says_what_to_install_without_psycopg(tmp_path):
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "import looptune, looptune.tune, looptune.cli\n"
            "from looptune.tune.database import Database\nfrom looptune.tune import DatabaseError\n"
            f"db = Database.open({str(tmp_path / 'w')!r}, create=True); print(len(db))\n"
            "try:\n    Database.open('postgresql://u:pw@localhost:1/db')\n"
            "except DatabaseError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "0", "a PostgreSQL database needs psycopg 3: pip install 'looptune[cluster]'"]
    out = subprocess.run([sys.executable, "-c", "import sys, looptune.cli, looptune.tune; "
                          "print('psycopg' in sys.modules)"], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_database_open_takes_urls_paths_and_work_dirs(tmp_path, pg_url):
    assert isinstance(Database.open(pg_url), PostgresDatabase)
    lite = Database.open(f"sqlite://{tmp_path}/f.sqlite", create=True)
    assert isinstance(lite, SQLiteDatabase) and lite.path == tmp_path / "f.sqlite"
    with pytest.raises(DatabaseError, match="no SQLite database at"):
        Database.open(f"sqlite://{tmp_path}/missing.sqlite")
    with pytest.raises(DatabaseError, match="that work dir does not exist"):
        Database.open(tmp_path / "nowhere")
    assert isinstance(Database.open(tmp_path / "new", create=True), SQLiteDatabase)


def test_db_stats_counts_per_workload_and_per_machine(pg_url, tmp_path, capsys):
    db = PostgresDatabase(pg_url)
    recs = records_of_two_workloads(db, seed=4)
    here = machine_fingerprint()
    for i, r in enumerate(recs):  # a third from elsewhere, the rest here or naming no machine
        machine = OTHER_MACHINE if i % 3 == 0 else here if i % 3 == 1 else None
        measure = {**r.measure, **({"machine": machine} if machine else {})}
        db.commit_tuning_record(TuningRecord(r.workload, r.trace, r.run_secs, r.target,
                                             measure=measure, error_class=r.error_class,
                                             error_msg=r.error_msg))
    n_other = len(range(0, len(recs), 3))
    assert main(["db", "stats", "--database", pg_url, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got == {"records": 15, "workloads": 2,
                   "fingerprints": {here["id"]: 15 - n_other, OTHER_MACHINE["id"]: n_other}}
    assert main(["db", "stats", "--database", pg_url]) == 0
    text = capsys.readouterr().out
    assert text.startswith("15 record(s) of 2 workload(s) in PostgresDatabase(")
    assert PASSWORD not in text
    assert f"{15 - n_other:>8}  {describe(here)}  (this machine)" in text
    assert f"{n_other:>8}  {describe(OTHER_MACHINE)}" in text
    for n, func in ((9, mm_func()), (6, mm_func(8, 12, 5))):  # per workload
        assert f"{n:>8}  {db.key_of(func)[:16]}  {func.name}" in text


def test_push_and_pull_are_idempotent(pg_url, tmp_path, capsys):
    local = SQLiteDatabase(work_dir=tmp_path / "a")
    recs = records_of_two_workloads(local, seed=5)
    for r in recs:
        local.commit_tuning_record(r)
    push = ["db", "push", "--work-dir", str(tmp_path / "a"), "--database", pg_url]
    assert main(push) == 0
    assert capsys.readouterr().out.startswith("pushed 15 record(s) from ")
    assert main(push) == 0
    assert "pushed 0 record(s)" in capsys.readouterr().out
    server = PostgresDatabase(pg_url)
    assert as_json(server.get_all_tuning_records()) == as_json(recs)
    extra = records_of_two_workloads(Database.create("memory"), seed=6)[:4]
    server.commit_records(extra)
    pull = ["db", "pull", "--work-dir", str(tmp_path / "b"), "--database", pg_url]
    assert main(pull) == 0 and "pulled 19 record(s)" in capsys.readouterr().out
    assert main(pull) == 0 and "pulled 0 record(s)" in capsys.readouterr().out
    assert as_json(SQLiteDatabase(work_dir=tmp_path / "b").get_all_tuning_records()) == \
        as_json(recs + extra)
    # the work dir read first, then the server: each trial listed once
    both = OrderedUnionDatabase(local, server)
    assert as_json(both.get_all_tuning_records()) == as_json(recs + extra)
    assert main(["db", "push", "--work-dir", str(tmp_path / "a")]) == 2
    assert "give --database postgresql://" in capsys.readouterr().err


def test_a_synced_database_goes_on_locally_and_sends_the_backlog(postgres, pg_url, tmp_path):
    local = SQLiteDatabase(work_dir=tmp_path / "w")
    shared = PostgresDatabase(pg_url, connect=False)
    recs = records_of_two_workloads(Database.create("memory"), seed=7)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        db = SyncedDatabase(local, shared, retry_s=0.0)
        for r in recs[:5]:
            db.commit_tuning_record(r)
        assert len(PostgresDatabase(pg_url)) == 5
        postgres.stop()
        try:
            for r in recs[5:10]:
                db.commit_tuning_record(r)  # the server is away: no error
            assert as_json(db.get_all_tuning_records()) == as_json(recs[:10])
            db.flush()
        finally:
            postgres.start()
    said = [str(w.message) for w in caught if issubclass(w.category, DatabaseWarning)]
    away = [m for m in said if "Tuning goes on in the local database" in m]
    assert len(away) == 1, said  # once, not per record
    assert "PostgreSQL server at 127.0.0.1" in away[0] and PASSWORD not in away[0]
    assert sum("record(s) of this run are in the local database" in m for m in said) == 1
    assert len(PostgresDatabase(pg_url)) == 5
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        db.commit_tuning_record(recs[10])  # the server is back: the backlog goes with it
    assert any("is back: sent it the 6 record(s)" in str(w.message) for w in caught)
    server = PostgresDatabase(pg_url)
    assert as_json(server.get_all_tuning_records()) == as_json(recs[:11])
    db.close()
    # a later run with the work dir sends what an earlier one could not
    for r in recs[11:]:
        SQLiteDatabase(work_dir=tmp_path / "w").commit_tuning_record(r)
    SyncedDatabase(SQLiteDatabase(work_dir=tmp_path / "w"), PostgresDatabase(pg_url)).close()
    assert as_json(server.get_all_tuning_records()) == as_json(recs)


def test_a_synced_database_still_refuses_a_wrong_password_at_open(pg_url, tmp_path):
    from looptune.tune.tune import _database
    bad = pg_url.replace(PASSWORD, "nope-nope")
    with pytest.raises(DatabaseError, match="refused the credentials"):
        _database(bad, tmp_path / "w")
    db = _database(pg_url, tmp_path / "w")
    assert isinstance(db, SyncedDatabase) and db.online


def test_every_command_with_a_work_dir_takes_database(pg_url, tmp_path, capsys):
    from looptune.cli import parser
    for argv in (["tune", "matmul"], ["tune-model", "m.onnx"], ["run", "m.onnx"],
                 ["db", "list"], ["report", "w"]):
        assert parser().parse_args([*argv, "--database", pg_url]).database == pg_url
    server = PostgresDatabase(pg_url)
    recs = records_of_two_workloads(server, seed=8)
    server.commit_records(recs)
    assert main(["report", "--database", pg_url]) == 0
    out = capsys.readouterr().out
    assert "matmul" in out and PASSWORD not in out
    # db list reads the work dir (if it holds a database), then the server: each trial once
    local = SQLiteDatabase(work_dir=tmp_path / "w")
    for r in recs[:4]:
        local.commit_tuning_record(r)
    assert main(["db", "list", "--work-dir", str(tmp_path / "w"), "--database", pg_url]) == 0
    listing = capsys.readouterr().out
    assert f"{9:>8}{3:>8}" in listing and f"{6:>8}{2:>8}" in listing, listing
