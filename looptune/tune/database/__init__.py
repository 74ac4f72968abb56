"""Databases of tuning records: the interface (base.py) and one file per storage."""
from .base import Database, TuningRecord, Workload, measure_settings, record_key, workload_key
from .json import JSONDatabase
from .memory import MemoryDatabase
from .postgres import PostgresDatabase  # imports psycopg only when one is opened
from .schedule_fn import ScheduleFnDatabase
from .sqlite import SQLiteDatabase
from .synced import SyncedDatabase
from .union import OrderedUnionDatabase, UnionDatabase
from .url import open_url
from .work_dir import open_work_dir

__all__ = ["Database", "JSONDatabase", "MemoryDatabase", "OrderedUnionDatabase",
           "PostgresDatabase", "SQLiteDatabase", "ScheduleFnDatabase", "SyncedDatabase",
           "TuningRecord", "UnionDatabase", "Workload",
           "measure_settings", "open_url", "open_work_dir", "record_key", "workload_key"]
