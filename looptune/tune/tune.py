"""The entry points: tune functions (tune_tir, tune_tasks) and compile them with their best
records (compile_tir)."""
from __future__ import annotations

import copy
import numbers
import os
import sys
import warnings
from pathlib import Path


from ..backend import Backend
from ..backend.base import check_fits
from ..error import BuildError
from ..runtime.ndarray import compare, pack_args, random_args
from ..schedule import ScheduleError
from ..schedule.primitives.layout import PACKED
from ..target import Target, host
from ..text import printable
from ..tir.func import PrimFunc
from .builder.base import Builder
from .context import TuneContext
from .database.base import Database
from .database.work_dir import formats_in, open_work_dir
from .error import DatabaseError, DatabaseWarning, TuneError
from .replay import replay
from .runner.base import EvaluatorConfig, Runner
from .task_scheduler.base import TaskScheduler


class NoTuningRecordError(LookupError):
    """compile_tir found no usable record: never a silent fallback to an untuned kernel."""


def _database(database, work_dir, *, create: bool = True) -> Database:
    """A database instance: the one given, a named one (kept in work_dir), a URL
    (Database.open; a PostgreSQL server with a work_dir: the two synced, SyncedDatabase), or
    the one work_dir holds, whatever its kind. With `create` (tuning) a work dir without one gets a
    new one (by default SQLite); without it (reading records) a missing work dir or database
    is a DatabaseError naming the path."""
    if isinstance(database, Database):
        return database
    if isinstance(database, str) and "://" in database:  # Database.open's URLs
        from .database.url import is_server
        if not is_server(database) or work_dir is None:
            return Database.open(database, create=create)
        from .database.postgres import PostgresDatabase
        from .database.synced import SyncedDatabase
        return SyncedDatabase(_database(None, work_dir, create=create),
                              PostgresDatabase(database, connect=False))
    if database not in (None, "json", "sqlite"):
        return Database.create(database)
    if work_dir is None:
        raise TuneError("pass work_dir= (tuning results are kept there, in an SQLite "
                        "database by default) or database=")
    found = formats_in(work_dir)
    if not create or (found and database is None):
        if create and len(found) > 1:
            raise DatabaseError(f"{work_dir} holds both an SQLite and a JSON tuning database; "
                                "pass database='sqlite' or 'json' to say which one to tune into")
        if create and found != ("sqlite",):
            warnings.warn(f"{work_dir} holds a JSON tuning database: tuning adds to it "
                          "(database='json' says so and silences this note)", DatabaseWarning)
        return open_work_dir(work_dir, database)
    try:
        Path(work_dir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TuneError(f"the work dir {work_dir} cannot be created ({e.strerror or e}); "
                        "pass a directory this process can write as work_dir") from None
    return Database.create(database or "sqlite", work_dir=str(work_dir))


def tune_tasks(tasks, *, work_dir=None, max_trials_global: int, num_trials_per_iter: int = 64,
               max_trials_per_task: int | None = None, max_time_s: float | None = None,
               task_weights=None, builder=None, runner=None, database=None,
               task_scheduler="gradient", evaluator: EvaluatorConfig | None = None,
               check_correctness: bool = True, progress: bool = True,
               measure_callbacks=(), default_schedule=None) -> Database:
    """Tune TuneContexts under one budget; returns the database holding every record.
    Re-running with the same work_dir resumes: earlier records count toward the budget and
    are not measured again. `builder` / `runner` default to the tasks' target kind's
    ("local" for cpu, "cuda" for cuda). `default_schedule(func, target)` (a Schedule; the
    model tuner passes looptune.dlight's): each task's default schedule is timed first, as a
    baseline record (TuningRecord.baseline) that costs no budget, weighs the warm-up and is
    what compile_tir applies when no tuned record beats it. A budget too small to give every
    task a first batch says so up front (BudgetWarning)."""
    _check_budget(max_trials_global=max_trials_global, num_trials_per_iter=num_trials_per_iter,
                  max_trials_per_task=max_trials_per_task, max_time_s=max_time_s)
    if evaluator is not None and not isinstance(evaluator, EvaluatorConfig):
        raise TuneError(f"evaluator must be an EvaluatorConfig, got {evaluator!r}")
    tasks = list(tasks)
    kinds = {t.target.kind for t in tasks}
    if len(kinds) > 1 and (builder is None or runner is None):
        raise TuneError(f"the tasks are for several target kinds ({', '.join(sorted(kinds))}); "
                        "tune each kind separately, or pass builder= and runner=")
    for t in tasks:  # the runner allocates every buffer of a candidate at once
        if t.target.kind == "cpu":
            try:
                check_fits(t.func)
            except BuildError as e:
                raise TuneError(f"task {t.task_name}: {e}") from None
    default = "cuda" if kinds == {"cuda"} else "local"
    fresh = database in (None, "json", "sqlite") and work_dir is not None \
        and not formats_in(work_dir)
    database = _database(database, work_dir)
    if fresh and progress:
        print(f"no tuning database in {printable(str(work_dir))} yet: created {database}",
              file=sys.stderr)
    builder = Builder.create(builder or default)
    runner = Runner.create(runner or default)
    try:
        _check_runs_here(tasks, runner)
    except TuneError:
        runner.close()
        raise
    if runner.evaluator is not None:  # a runner that fixes the settings (a simulation table)
        if evaluator is not None and evaluator != runner.evaluator:
            raise TuneError(f"the runner's results are measured with {runner.evaluator} (its "
                            f"table's settings), not {evaluator}: leave evaluator= unset")
        evaluator = runner.evaluator
    scheduler = TaskScheduler.create(task_scheduler)
    try:
        scheduler.tune(tasks, task_weights=task_weights,
                       max_trials_global=max_trials_global,
                       max_trials_per_task=max_trials_per_task,
                       num_trials_per_iter=num_trials_per_iter, builder=builder, runner=runner,
                       database=database, evaluator=evaluator or EvaluatorConfig(),
                       max_time_s=max_time_s, check_correctness=check_correctness,
                       progress=progress, measure_callbacks=measure_callbacks,
                       default_schedule=default_schedule)
    finally:
        runner.close()
        database.flush()
    return database


def _check_runs_here(tasks, runner) -> None:
    """TuneError when a local runner would time code for an ISA this machine lacks (a target
    such as "llvm -mcpu=skylake-avx512" on an AVX2 machine): every candidate would fail."""
    from .runner.local import LocalRunner
    if not isinstance(runner, LocalRunner):
        return
    here = host()
    for t in {t.target for t in tasks if t.target.kind == "cpu"}:
        missing = here.lacks(t.isa())
        if missing:
            raise TuneError(f"tuning times candidates on this machine ({here.model or here.arch}"
                            f"), which lacks {', '.join(missing)} that target {t} needs; tune "
                            "for this machine (target 'llvm', or an -mcpu it has) and build "
                            "for the other ISA with looptune.build.generate_source")


def _check_budget(*, max_time_s, **trials) -> None:
    """TuneError unless every trial count is a whole number >= 1 (max_trials_per_task may be
    None) and the time budget, if any, is a positive number of seconds."""
    for name, n in trials.items():
        if n is None and name == "max_trials_per_task":
            continue
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise TuneError(f"{name} must be a whole number of trials, at least 1; got {n!r}")
    if max_time_s is not None and (isinstance(max_time_s, bool)
                                   or not isinstance(max_time_s, numbers.Real)
                                   or not max_time_s > 0):
        raise TuneError(f"max_time_s must be a positive number of seconds (or None: no time "
                        f"limit); got {max_time_s!r}")


def tune_tir(mod_or_func, target="cpu", work_dir=None, *, max_trials_global: int,
             num_trials_per_iter: int = 64, max_trials_per_task: int | None = None,
             max_time_s: float | None = None, seed: int | None = None,
             space="post-order-apply", strategy="evolutionary", cost_model=None,
             task_name: str | None = None, **kwargs) -> Database:
    """Tune one PrimFunc, or several (a list or a {name: PrimFunc} dict) as separate tasks.
    `strategy`: "evolutionary" (mutation ranked by a cost model, the default) or
    "replay-trace" (random sampling), or a SearchStrategy. `cost_model` ("xgb", the default,
    "mlp", "random" or a CostModel) is shared by every task's evolutionary search, so what it
    learns on one workload helps the others. `seed` makes the run reproducible; the rest is
    passed to tune_tasks."""
    _check_budget(max_trials_global=max_trials_global, num_trials_per_iter=num_trials_per_iter,
                  max_trials_per_task=max_trials_per_task, max_time_s=max_time_s)
    if isinstance(mod_or_func, PrimFunc):
        funcs = {task_name or mod_or_func.name: mod_or_func}
    elif isinstance(mod_or_func, dict):
        funcs = dict(mod_or_func)
    elif isinstance(mod_or_func, (list, tuple)):
        funcs = {getattr(f, "name", str(i)): f for i, f in enumerate(mod_or_func)}
    else:
        funcs = {}
    if not funcs or not all(isinstance(f, PrimFunc) for f in funcs.values()):
        raise TypeError(f"tune_tir needs a PrimFunc (te.create_prim_func) or a list/dict of "
                        f"them, got {type(mod_or_func).__name__}")
    target = Target.create(target)
    if cost_model is not None and strategy != "evolutionary":
        raise TuneError("cost_model= is for strategy='evolutionary'; pass a SearchStrategy "
                        "instance to configure another one")
    shared_model = None
    if strategy == "evolutionary":
        from .cost_model.base import CostModel
        shared_model = CostModel.create(cost_model or "xgb")
    contexts = []
    for i, (name, f) in enumerate(funcs.items()):
        one = len(funcs) == 1
        if shared_model is not None:
            from .search_strategy.evolutionary import EvolutionarySearch
            strat = EvolutionarySearch(cost_model=shared_model)
        else:
            strat = strategy if one or isinstance(strategy, str) else copy.deepcopy(strategy)
        contexts.append(TuneContext(
            f, target, space if one or isinstance(space, str) else copy.deepcopy(space),
            strat, task_name=name, seed=None if seed is None else seed + i))
    return tune_tasks(contexts, work_dir=work_dir, max_trials_global=max_trials_global,
                      num_trials_per_iter=num_trials_per_iter,
                      max_trials_per_task=max_trials_per_task, max_time_s=max_time_s, **kwargs)


def verify(mod, func: PrimFunc, *, seed: int = 0, rtol: float = 1e-3, atol: float = 1e-3,
           packed: tuple = ()) -> bool:
    """Does `mod` compute what the unscheduled `func` computes, on random inputs, by the
    runner's rule (runtime.ndarray.compare: NaN where the reference is NaN, the same infinity
    where it is infinite, else within tolerance)? `packed`: the arguments `mod` takes in a
    packed layout (its function's "packed_params"). The reference runs its outermost loops
    on every core (the same arithmetic per output): a 4096^3 matmul, a GPU size, would take
    minutes on one."""
    from .measure import outer_loops_parallel
    ref = Backend.for_target("cpu").build(outer_loops_parallel(func), name=func.name,
                                          num_threads=len(os.sched_getaffinity(0)),
                                          threads_from="the reference of compile_tir's check")
    want = random_args(ref.args, seed)
    got = pack_args([a.copy() for a in want], packed)
    ref(*want)
    mod(*got)
    return all(compare(info.name, b, a, rtol, atol) is None
               for info, a, b in zip(mod.args, want, got) if info.written)


def _choice(rec, records) -> str:
    """Which schedule compile_tir applies, and why (`mod.choice`)."""
    tuned = [r for r in records if not r.baseline]
    if rec.baseline:
        best = min((r.median_secs for r in tuned), default=None)
        return ("the default schedule: measured the same way, it took "
                f"{rec.median_secs * 1e3:.4g} ms" + (
                    f", faster than every tuned record (the best {best * 1e3:.4g} ms)"
                    if best is not None else ", and no tuned record verifies"))
    return f"the tuned record measured at {rec.median_secs * 1e3:.4g} ms"


def _from_schedule_fn(database, func, target, backend, *, check, num_threads, name):
    """A database with no record for func may still schedule it (ScheduleFnDatabase, alone
    or in a union): that schedule, checked like a record's, or None."""
    sch = database.query_schedule(func, target)
    if sch is None:
        return None
    mod = backend.build(sch, name=name, num_threads=num_threads or target.cores)
    if check and not verify(mod, func, packed=sch.func.attr(PACKED, ())):
        raise TuneError(f"{func.name}: the schedule function of {type(database).__name__} "
                        "computes a wrong result (checked against the unscheduled program)")
    mod.record = None
    mod.schedule = sch
    mod.choice = f"the schedule function of {type(database).__name__}"
    return mod


def compile_tir(database: Database, func: PrimFunc, target="cpu", *, check: bool = True,
                num_threads: int | None = None, evaluator=None, name: str | None = None):
    """Build func with its best record (checked against the unscheduled program first;
    a record that fails to replay or computes a wrong result is reported and skipped). The
    best may be a baseline record (TuningRecord.baseline): the default schedule measured
    the same way was faster than every tuned one, and the module is the default schedule.

    Records are ranked against those measured with the same settings: `evaluator`'s (an
    EvaluatorConfig), by default the latest tuning run's (Database.query_tuning_record).
    The module runs with the thread count its record was measured with (a record without
    one: the target's cores) unless `num_threads` says otherwise, so that it takes the time
    the record shows. `name` names the kernel (default: the function's). The module is the
    one that was verified: `mod.artifact` (a backend Artifact) is what a model links. Raises
    NoTuningRecordError when there is no record - build(func) compiles it untuned.
    `mod.choice` says which schedule it applied and why."""
    target = Target.create(target)
    backend = Backend.for_target(target)
    if not database.has_workload(func):
        mod = _from_schedule_fn(database, func, target, backend, check=check,
                                num_threads=num_threads, name=name)
        if mod is not None:
            return mod
        raise NoTuningRecordError(
            f"no tuning record for {func.name} (workload {database.key_of(func)}): it was "
            "never tuned with this database. Tune it first (looptune tune / tune_tir), or "
            "build it untuned with looptune.build(func)")
    records = database.query_tuning_record(func, target, k=16, evaluator=evaluator)
    if not records:
        raise NoTuningRecordError(
            f"{func.name} (workload {database.key_of(func)}) has no successful record for "
            f"target {target.key()}" + ("" if evaluator is None else " measured with these "
                                        "settings") + "; tune it on this target first")
    for rec in records:
        try:
            sch = replay(rec, func, lenient=database.module_equality == "anchor-block")
        except ScheduleError as e:
            warnings.warn(f"{func.name}: a record ({rec.median_secs * 1e3:.3f} ms) no longer "
                          f"replays and is skipped: {e}", DatabaseWarning)
            continue
        threads, source = num_threads, "the num_threads argument"
        if threads is None:
            threads = rec.measure.get("num_threads") or target.cores
            source = f"the tuning record of {func.name}"
        mod = backend.build(sch, name=name, num_threads=threads, threads_from=source)
        if check and not verify(mod, func, packed=sch.func.attr(PACKED, ())):
            warnings.warn(f"{func.name}: a record ({rec.median_secs * 1e3:.3f} ms) computes a "
                          "wrong result and is skipped", DatabaseWarning)
            continue
        mod.record = rec
        mod.schedule = sch
        mod.choice = _choice(rec, records)
        return mod
    raise NoTuningRecordError(f"none of the {len(records)} best records of {func.name} "
                              "replays and verifies; re-tune it")
