"""The database a work dir already holds: its SQLite file, or its two JSON-lines files."""
from __future__ import annotations

from pathlib import Path

from ..error import DatabaseError
from .json import RECORD_FILE, JSONDatabase
from .sqlite import DEFAULT_FILE, SQLiteDatabase


def open_work_dir(path) -> SQLiteDatabase | JSONDatabase:
    """The database in work dir `path` (or `path` itself, an SQLite file); DatabaseError
    if there is none: opening never creates one."""
    p = Path(path)
    if p.is_file():
        return SQLiteDatabase(path=str(p))
    if (p / DEFAULT_FILE).exists():
        return SQLiteDatabase(work_dir=str(p))
    if (p / RECORD_FILE).exists():
        return JSONDatabase(work_dir=str(p))
    raise DatabaseError(f"no tuning database in {p}/ (expected {DEFAULT_FILE} or {RECORD_FILE}); "
                        "tune into that work dir first, or give the work dir of an earlier run")
