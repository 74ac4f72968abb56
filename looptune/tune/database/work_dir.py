"""The database a work dir already holds: its SQLite file, or its two JSON-lines files.
Readers open what is there and never create one; a mistyped path is an error naming it."""
from __future__ import annotations

import warnings
from pathlib import Path

from ..error import DatabaseError, DatabaseWarning
from .json import RECORD_FILE, WORKLOAD_FILE, JSONDatabase
from .sqlite import DEFAULT_FILE, SQLiteDatabase
from .union import UnionDatabase

FILES = {"sqlite": (DEFAULT_FILE,), "json": (RECORD_FILE, WORKLOAD_FILE)}


def formats_in(path) -> tuple:
    """The kinds of database ("sqlite", "json") work dir `path` holds; () for none, or no
    such directory."""
    p = Path(path)
    return tuple(kind for kind, files in FILES.items() if any((p / f).exists() for f in files))


def open_work_dir(path, kind: str | None = None) -> SQLiteDatabase | JSONDatabase | UnionDatabase:
    """The database in work dir `path` (or `path` itself, an SQLite file), of the kind it
    holds (`kind`, if given, must be that one). DatabaseError if there is none: opening
    never creates one. A dir holding both kinds (an older looptune added an SQLite database
    beside a JSON one) is read as the union of both, with a warning."""
    p = Path(path)
    if p.is_file():
        if kind not in (None, "sqlite"):
            raise DatabaseError(f"{p} is a file (an SQLite database), not a work dir of a "
                                f"{kind} database; give the work dir instead")
        return SQLiteDatabase(path=str(p))
    if not p.exists():
        raise DatabaseError(f"no tuning database in {p}: that work dir does not exist (a "
                            "typo?); give the work dir of an earlier tuning run")
    found = formats_in(p)
    if not found:
        raise DatabaseError(f"no tuning database in {p}/ (expected {DEFAULT_FILE} or "
                            f"{RECORD_FILE}); tune into that work dir first, or give the work "
                            "dir of an earlier run")
    if kind is not None:
        check_kind(p, kind)
        return _open(p, kind)
    if len(found) > 1:
        warnings.warn(f"{p} holds both an SQLite ({DEFAULT_FILE}) and a JSON ({RECORD_FILE}) "
                      "tuning database; reading the records of both", DatabaseWarning)
        return UnionDatabase(*(_open(p, k) for k in found))
    return _open(p, found[0])


def check_kind(path, kind: str) -> None:
    """DatabaseError if work dir `path` holds a database of another kind than `kind` and none
    of that kind: a new one beside it would silently hide its records."""
    found = formats_in(path)
    if found and kind not in found:
        other = found[0]
        raise DatabaseError(
            f"{path} holds {_NAMES[other]} tuning database ({FILES[other][0]}), not "
            f"{_NAMES[kind]} one: open it as what it is (database={other!r}, or leave "
            "database= out), or give another work dir")


_NAMES = {"sqlite": "an SQLite", "json": "a JSON"}


def _open(p: Path, kind: str):
    return SQLiteDatabase(work_dir=str(p)) if kind == "sqlite" else JSONDatabase(p)
