"""The tuning engine: design spaces from schedule rules, search, measurement, databases."""
from .builder import Builder, BuilderInput, BuilderResult, LocalBuilder
from .context import TuneContext
from .error import BudgetWarning, DatabaseError, DatabaseWarning, SimulationError, TuneError
from .database import (Database, JSONDatabase, MemoryDatabase, OrderedUnionDatabase,
                       ScheduleFnDatabase, SQLiteDatabase, TuningRecord, UnionDatabase, Workload)
from .postproc import Postproc
from .runner import (EvaluatorConfig, LocalRunner, Runner, RunnerInput, RunnerResult,
                     SimulatedRunner, simulate)
from .schedule_rule import ScheduleRule
from .mutator import Mutator
from .search_strategy import EvolutionarySearch, MeasureCandidate, ReplayTrace, SearchStrategy
from .space_generator import PostOrderApply, ScheduleFn, SpaceGenerator
from .task import Task, register_workload
from .task_scheduler import GradientBased, RoundRobin, TaskScheduler
from .tune import NoTuningRecordError, compile_tir, tune_tasks, tune_tir, verify

__all__ = [
    "BudgetWarning", "Builder", "BuilderInput", "BuilderResult", "Database", "DatabaseError",
    "DatabaseWarning", "EvaluatorConfig", "EvolutionarySearch", "GradientBased", "JSONDatabase", "Mutator",
    "LocalBuilder", "LocalRunner", "MeasureCandidate", "MemoryDatabase", "NoTuningRecordError",
    "OrderedUnionDatabase", "PostOrderApply", "Postproc", "ReplayTrace", "RoundRobin", "Runner",
    "RunnerInput", "RunnerResult", "SQLiteDatabase", "ScheduleFn", "ScheduleFnDatabase",
    "ScheduleRule", "SearchStrategy", "SimulatedRunner", "SimulationError", "SpaceGenerator",
    "Task", "TaskScheduler", "TuneContext",
    "TuneError", "TuningRecord", "UnionDatabase", "Workload", "compile_tir", "register_workload",
    "simulate", "tune_tasks", "tune_tir", "verify",
]
