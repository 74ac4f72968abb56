"""A throw-away PostgreSQL cluster for the tests: initdb into a temp dir, started on a free
port (TCP on 127.0.0.1 with password authentication, the Unix socket in the temp dir), one
per test process, so pytest-xdist workers never share one. As root, PostgreSQL's programs run
as the `postgres` user (they refuse root)."""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time

USER, PASSWORD = "looptune_test", "s3cret-pw"


def bin_dir() -> str | None:
    """The directory of initdb / pg_ctl: PATH, else Debian's /usr/lib/postgresql/N/bin."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return os.path.dirname(found)
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]))
    return next((d for d in reversed(dirs) if os.path.exists(os.path.join(d, "initdb"))), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """One cluster: `url(dbname)` for the test user, `create_database()` for a fresh one,
    `stop()` / `start()` to take it away and bring it back mid-test."""

    def __init__(self):
        self.bin = bin_dir()
        if self.bin is None:
            raise RuntimeError("no PostgreSQL programs (initdb, pg_ctl): apt-get install "
                               "postgresql")
        self.root = tempfile.mkdtemp(prefix="looptune-pg-")
        self.data = os.path.join(self.root, "data")
        self.log = os.path.join(self.root, "log")
        self.port = free_port()
        self.running = False
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.root, "postgres")
        pwfile = os.path.join(self.root, "pw")
        with open(pwfile, "w") as f:
            f.write("superpw\n")
        if self._as_postgres:
            shutil.chown(pwfile, "postgres")
        self._run("initdb", "-D", self.data, "-U", "postgres", "--pwfile", pwfile,
                  "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8",
                  "--no-sync")
        self.start()
        self.sql(f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")
        self._count = 0

    def _run(self, prog: str, *args, check: bool = True):
        cmd = [os.path.join(self.bin, prog), *args]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120)

    def start(self) -> None:
        if self.running:
            return
        opts = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c full_page_writes=off -c max_connections=60")
        out = self._run("pg_ctl", "-D", self.data, "-l", self.log, "-o", opts, "-w", "start",
                        check=False)
        if out.returncode != 0:
            log = open(self.log).read()[-2000:] if os.path.exists(self.log) else ""
            raise RuntimeError(f"pg_ctl start failed: {out.stderr}\n{log}")
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", self.data, "-m", mode, "-w", "stop", check=False)
        self.running = False

    def sql(self, sql: str, dbname: str = "postgres", params=()) -> list:
        """Run one statement as the superuser (over the Unix socket); its rows, if any."""
        import psycopg
        with psycopg.connect(host=self.root, port=self.port, user="postgres", dbname=dbname,
                             autocommit=True) as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def create_database(self) -> str:
        """A new empty database owned by the test user; its name."""
        self._count += 1
        name = f"lt_{os.getpid()}_{self._count}"
        self.sql(f"CREATE DATABASE {name} OWNER {USER}")
        return name

    def url(self, dbname: str, *, password: str = PASSWORD, port: int | None = None) -> str:
        return f"postgresql://{USER}:{password}@127.0.0.1:{port or self.port}/{dbname}"

    def close(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def wait_until(cond, timeout: float = 30.0, step: float = 0.05) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()
