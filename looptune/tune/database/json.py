"""JSONDatabase: two append-only JSON-lines files in a work directory.

    database_workload.json       one Workload.to_json() per line ({"key", "name", "func"})
    database_tuning_record.json  one TuningRecord.to_json() per line (its "workload" is a key)

Writers append each line under an exclusive flock of the file and readers read under a
shared one, so several processes may write at once, no reader sees half a line, and a line is
never lost to another writer. Nothing ever truncates or rewrites a file: a writer killed or out
of disk space mid-line leaves an incomplete line, which the next append ends, and which opening
reports (file and line number) as a warning and skips, with the lines after it kept.
"""
from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from ..error import DatabaseError
from ...tir.func import as_prim_func
from .base import Database, TuningRecord, Workload
from ._view import Skipper, View

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"


@Database.registry.register("json")
class JSONDatabase(Database):
    """A database in two JSON-lines files of `work_dir` (see above), or wherever
    `path_workload` and `path_tuning_record` say (MetaSchedule's spelling; either may be given
    alone, the other then is in work_dir): readable by people and by any tool, appended by
    several processes at once."""

    def __init__(self, work_dir=None, module_equality: str = "structural", *,
                 path_workload=None, path_tuning_record=None):
        super().__init__(module_equality)
        if work_dir is None and (path_workload is None or path_tuning_record is None):
            raise DatabaseError("JSONDatabase needs work_dir= (a directory for both files) or "
                                "both path_workload= and path_tuning_record=")
        if work_dir is not None:
            from .work_dir import check_kind
            check_kind(Path(work_dir), "json")
        self.path_workload = Path(path_workload or Path(work_dir) / WORKLOAD_FILE)
        self.path_tuning_record = Path(path_tuning_record or Path(work_dir) / RECORD_FILE)
        self.work_dir = Path(work_dir) if work_dir is not None else self.path_tuning_record.parent
        for d in {self.path_workload.parent, self.path_tuning_record.parent}:
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise DatabaseError(f"the directory {d} cannot be created ({e.strerror or e}); "
                                    "pass a directory this process can write") from None
        self._view: View | None = None
        self._file_keys: set = set()  # workload keys that have a line in the workload file

    # ------------------------------------------------------------------ loading
    def _load(self) -> View:
        """Read both files once; later commits update the view as they append."""
        if self._view is not None:
            return self._view
        view = View(self.key_of)
        skipper = Skipper(str(self.path_workload))
        for lineno, obj in _read_lines(self.path_workload, skipper):
            key = view.load_workload(obj, skipper.at(f"line {lineno}"))
            if key is not None:
                self._file_keys.add(key)
        skipper.done()
        skipper = Skipper(str(self.path_tuning_record))
        for lineno, obj in _read_lines(self.path_tuning_record, skipper):
            view.load_record(obj, skipper.at(f"line {lineno}"))
        skipper.done()
        self._view = view
        return view

    # ------------------------------------------------------------------ storage
    def has_workload(self, func) -> bool:
        func = as_prim_func(func)
        return self._holds(func, self._load().workloads)

    def commit_workload(self, func) -> Workload:
        func = as_prim_func(func)
        view = self._load()
        wl = view.add_workload(func)
        self._write_workload(wl)
        return wl

    def commit_tuning_record(self, record: TuningRecord) -> None:
        view = self._load()
        record = view.own(record)
        self._write_workload(record.workload)
        _append_line(self.path_tuning_record, record.to_json())
        view.records.append(record)

    def get_all_tuning_records(self) -> list:
        return list(self._load().records)

    def __len__(self) -> int:
        return len(self._load().records)

    def _write_workload(self, wl: Workload) -> None:
        if wl.key not in self._file_keys:
            _append_line(self.path_workload, wl.to_json())
            self._file_keys.add(wl.key)

    def __repr__(self):
        if self.path_tuning_record == self.work_dir / RECORD_FILE and \
                self.path_workload == self.work_dir / WORKLOAD_FILE:
            return f"JSONDatabase({str(self.work_dir)!r})"
        return (f"JSONDatabase(path_workload={str(self.path_workload)!r}, "
                f"path_tuning_record={str(self.path_tuning_record)!r})")


def _read_lines(path: Path, skipper: Skipper):
    """(line number, parsed object) of every line that parses; bad lines are reported."""
    try:
        with open(path, "rb") as f:
            fcntl.flock(f, fcntl.LOCK_SH)  # no writer is half-way through a line
            data = f.read()
    except FileNotFoundError:
        return
    except OSError as e:
        raise DatabaseError(f"cannot read {path} ({e.strerror or e}); check that this process "
                            "may read the work dir") from None
    last = data.count(b"\n") + 1
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError) as err:  # also UnicodeDecodeError; too deep
            what = "partial last line" if lineno == last else \
                "corrupt line (or one a writer killed or out of disk space left incomplete)"
            skipper.skip(f"line {lineno}", f"{what}: {type(err).__name__}: {err}")
            continue
        yield lineno, obj


def _append_line(path: Path, obj: dict) -> None:
    """Append one line under an exclusive lock of the file. If a killed writer left an
    incomplete last line, the new line starts on a fresh one. A write that fails (disk full,
    read-only file) raises DatabaseError; what it wrote is ended as a line of its own, which
    readers skip, and nothing is truncated: other writers' lines after ours stay."""
    data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as e:
        raise DatabaseError(f"cannot open {path} to add a record ({e.strerror or e}); make the "
                            "work dir writable or choose another one") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        _write_all(fd, data, size)
    except OSError as e:
        raise DatabaseError(f"cannot add a record to {path} ({e.strerror or e}); free disk "
                            "space or choose another work dir: the records already stored are "
                            "kept") from None
    finally:
        os.close(fd)  # releases the lock


def _write_all(fd: int, data: bytes, size: int) -> None:
    """Write all of data at the end of the file (`size` bytes before); after a failure, try
    to end what was written with a newline (if that fails too, the next append starts with
    one)."""
    done = 0
    try:
        while done < len(data):
            n = os.write(fd, data[done:])
            if n <= 0:
                raise OSError(28, "No space left on device (short write)")
            done += n
    except OSError:
        try:
            if os.fstat(fd).st_size > size:
                os.write(fd, b"\n")
        except OSError:
            pass
        raise
