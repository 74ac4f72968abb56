"""Databases of tuning records: the interface (base.py) and one file per storage."""
from .base import Database, TuningRecord, Workload, measure_settings, workload_key
from .json import JSONDatabase
from .memory import MemoryDatabase
from .schedule_fn import ScheduleFnDatabase
from .sqlite import SQLiteDatabase
from .union import OrderedUnionDatabase, UnionDatabase
from .work_dir import open_work_dir

__all__ = ["Database", "JSONDatabase", "MemoryDatabase", "OrderedUnionDatabase",
           "SQLiteDatabase", "ScheduleFnDatabase", "TuningRecord", "UnionDatabase", "Workload",
           "measure_settings", "open_work_dir", "workload_key"]
