"""Database.open(url): the database a URL or path names, as every command's --database reads
it: postgresql://... a PostgreSQL server, sqlite://PATH an SQLite file, anything else a work
dir (or an SQLite file)."""
from __future__ import annotations

from pathlib import Path

from ..error import DatabaseError
from .base import Database

FORMS = "postgresql://user:password@host:5432/dbname, sqlite:///path/to/file.sqlite or a work dir"


def hide_password(url: str) -> str:
    """url with its password replaced by ***, also when the rest does not parse."""
    scheme, sep, rest = url.partition("://")
    cred, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in cred:
        return url
    return f"{scheme}://{cred.split(':', 1)[0]}:***@{host}"


def scheme_of(url) -> str:
    """The scheme of a database URL ('postgresql', 'sqlite', ...); '' for a path."""
    text = str(url)
    scheme, sep, _ = text.partition("://")
    return scheme.lower() if sep and scheme.isalnum() else ""


def is_server(url) -> bool:
    """Does url name a PostgreSQL server?"""
    from .postgres import SCHEMES
    return scheme_of(url) in SCHEMES


def open_url(url, *, create: bool = False) -> Database:
    """The database `url` names. `create` (tuning): a work dir or SQLite file without a
    database gets a new SQLite one; without it (reading) a missing one is a DatabaseError
    naming the path. A PostgreSQL database must exist on its server (its tables are created)."""
    text = str(url)
    scheme = scheme_of(text)
    if is_server(text):
        from .postgres import PostgresDatabase
        return PostgresDatabase(text)
    if scheme == "sqlite":  # sqlite:///abs/path or sqlite://relative/path, as file: URLs
        from .sqlite import SQLiteDatabase
        path = Path(text[len("sqlite://"):])
        if not str(path) or str(path) == ".":
            raise DatabaseError(f"the URL {text!r} names no file: sqlite:///path/to/file.sqlite")
        if not create and not path.is_file():
            raise DatabaseError(f"no SQLite database at {path} (from {text!r}); give the file of "
                                "an earlier tuning run")
        return SQLiteDatabase(path=path)
    if scheme:
        raise DatabaseError(f"unknown kind of database URL {hide_password(text)!r} ({scheme}://); "
                            f"use {FORMS}")
    from .work_dir import formats_in, open_work_dir
    if create and not Path(text).is_file() and not formats_in(text):
        return Database.create("sqlite", work_dir=text)
    return open_work_dir(text)
