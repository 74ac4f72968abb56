"""JSONDatabase: two append-only JSON-lines files in a work directory.

    database_workload.json       one Workload.to_json() per line ({"key", "name", "func"})
    database_tuning_record.json  one TuningRecord.to_json() per line (its "workload" is a key)

Every line is appended by a single os.write on an O_APPEND descriptor, so concurrent writers
do not interleave and a killed writer leaves at most a partial last line. Opening reports a
corrupt line (file and line number) as a warning and skips it; it is never fatal.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..error import DatabaseError
from .base import Database, TuningRecord, Workload
from ._view import Skipper, View

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"


@Database.registry.register("json")
class JSONDatabase(Database):
    def __init__(self, work_dir, module_equality: str = "structural"):
        super().__init__(module_equality)
        self.work_dir = Path(work_dir)
        try:
            self.work_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DatabaseError(f"the work dir {work_dir} cannot be created ({e.strerror or e}); "
                                "pass a directory this process can write") from None
        self.path_workload = self.work_dir / WORKLOAD_FILE
        self.path_tuning_record = self.work_dir / RECORD_FILE
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
        return self._holds(func, self._load().workloads)

    def commit_workload(self, func) -> Workload:
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
        return f"JSONDatabase({str(self.work_dir)!r})"


def _read_lines(path: Path, skipper: Skipper):
    """(line number, parsed object) of every line that parses; bad lines are reported."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError) as err:  # also UnicodeDecodeError; too deep
            partial = lineno == data.count(b"\n") + 1
            skipper.skip(f"line {lineno}", f"{'partial last line' if partial else 'corrupt line'}"
                                           f": {type(err).__name__}: {err}")
            continue
        yield lineno, obj


def _append_line(path: Path, obj: dict) -> None:
    """Append one line with a single write. If a killed writer left a partial last line, the
    new line starts on a fresh line so only the partial one is lost. A write that fails (disk
    full, read-only file) is undone and raises DatabaseError; earlier lines are untouched."""
    data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as e:
        raise DatabaseError(f"cannot open {path} to add a record ({e.strerror or e}); make the "
                            "work dir writable or choose another one") from None
    size = None
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        n = os.write(fd, data)
        if n != len(data):
            raise OSError(28, "No space left on device (short write)")
    except OSError as e:
        if size is not None:
            try:
                os.ftruncate(fd, size)  # drop the partial line
            except OSError:
                pass
        raise DatabaseError(f"cannot add a record to {path} ({e.strerror or e}); free disk "
                            "space or choose another work dir: the records already stored are "
                            "kept") from None
    finally:
        os.close(fd)
