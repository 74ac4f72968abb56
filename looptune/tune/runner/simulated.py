"""SimulatedRunner: answers candidates from measurements already made (a sweep of a space,
kept in a database), so that search strategies can be compared over many seeds in seconds.
Nothing is invented: a schedule the table lacks is measured for real, or is an error."""
from __future__ import annotations

import dataclasses

from ...target import Target
from ..database.base import Database, TuningRecord, measure_settings
from ..error import SimulationError, TuneError
from .base import EvaluatorConfig, Runner, RunnerResult

ON_MISSING = ("error", "measure")
_EVALUATOR_FIELDS = tuple(f.name for f in dataclasses.fields(EvaluatorConfig))


@Runner.registry.register("simulated")
class SimulatedRunner(Runner):
    """The table is every record of `database` (a Database or a work dir), successful or
    failed, made on one target with one set of comparable measurement settings: `target`
    and `evaluator` pick them, by default those of the newest successful record. It is keyed
    by (workload key, structural hash of the scheduled function); of two records of one
    schedule, the newer answers.

    A stored record answers as itself: its run times, or its failure (error class and
    message), without building anything. The record the tuner then writes carries the stored
    record's `measure` (its settings, compiler, source hash) plus `"simulated": True`. The
    tuning run uses the table's settings (`self.evaluator`), and must tune for the table's
    `target`. A schedule not in the table: `on_missing="error"` raises SimulationError;
    `"measure"` builds it and has `runner` (default "local") measure it with the table's
    settings, and later runs over this runner find it in the table (`database` is not
    written). `hits`, `misses` count the answers.

    Simulation does not model time: a strategy that paces its search by the measured wall
    time (EvolutionarySearch's `max_search_share`) should turn that off (`simulate` does)."""

    confirms_best = False  # a table's answer is the same twice

    def __init__(self, database, *, on_missing: str = "error", target=None, evaluator=None,
                 runner="local"):
        if on_missing not in ON_MISSING:
            raise TuneError(f"SimulatedRunner: on_missing must be one of {ON_MISSING}, got "
                            f"{on_missing!r}")
        if not isinstance(database, Database):
            from ..database.work_dir import open_work_dir
            database = open_work_dir(database)
        self.on_missing = on_missing
        self.runner_spec = runner
        self._runner: Runner | None = None
        self.hits = self.misses = 0
        records = [r for r in database.get_all_tuning_records() if r.sch_hash]
        if not records:
            raise TuneError(f"SimulatedRunner: {_describe(database)} holds no records to answer "
                            "from; sweep the space first (e.g. tune_tir with "
                            "strategy='replay-trace' and many trials)")
        newest = _newest([r for r in records if r.ok] or records)
        self.target = Target.create(target) if target is not None else newest.target
        tkey = self.target.key()
        on_target = [r for r in records if r.target.key() == tkey]
        if not on_target:
            have = ", ".join(sorted({r.target.key() for r in records}))
            raise TuneError(f"SimulatedRunner: no record was measured on {tkey} (the table's "
                            f"targets: {have}); pass one of them as target=")
        if evaluator is None:
            evaluator = _newest([r for r in on_target if r.ok] or on_target).measure
        want = measure_settings(evaluator)
        measure = evaluator if isinstance(evaluator, dict) else evaluator.to_json()
        self.evaluator = EvaluatorConfig.from_json(
            {k: v for k, v in measure.items() if k in _EVALUATOR_FIELDS})
        self.table: dict = {}  # (workload key, sch_hash) -> RunnerResult
        for r in sorted(on_target, key=lambda r: r.time):
            if measure_settings(r.measure) == want:
                self.table[(r.workload.key, r.sch_hash)] = answer(r)
        if not self.table:
            raise TuneError(f"SimulatedRunner: no record on {tkey} was measured with the "
                            f"settings {dict(want)}")
        self.workloads = {r.workload.key: r.workload.name for r in on_target}

    def __len__(self) -> int:
        return len(self.table)

    def recall(self, workload_key, sch_hash, target) -> RunnerResult | None:
        target = Target.create(target)
        if target.key() != self.target.key():
            raise SimulationError(f"the table was measured on {self.target} ({self.target.key()}), "
                                  f"the run tunes for {target.key()}: pass the table's target "
                                  "(runner.target) to the tuner")
        found = self.table.get((workload_key, sch_hash))
        if found is not None:
            self.hits += 1
            return found
        if self.on_missing == "error":
            raise SimulationError(self._missing(workload_key, sch_hash))
        return None

    def run(self, inputs: list) -> list:
        out, todo = [], []
        for inp in inputs:
            found = self.table.get((inp.workload_key, inp.sch_hash))
            if found is None and self.on_missing == "error":
                raise SimulationError(self._missing(inp.workload_key, inp.sch_hash))
            if found is not None:
                self.hits += 1
            else:
                todo.append(len(out))
            out.append(found)
        if todo:
            self.misses += len(todo)
            if self._runner is None:
                self._runner = Runner.create(self.runner_spec)
            measured = self._runner.run([inputs[i] for i in todo])
            for i, res in zip(todo, measured):
                out[i] = res
                inp = inputs[i]
                if inp.workload_key and inp.sch_hash and inp.config == self.evaluator:
                    self.table[(inp.workload_key, inp.sch_hash)] = dataclasses.replace(
                        res, measure={**self.evaluator.to_json(), "aborted_early": res.aborted_early,
                                      "simulated": True})
        return out

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def _missing(self, workload_key, sch_hash) -> str:
        name = self.workloads.get(workload_key)
        if name is None:
            known = ", ".join(f"{n} ({k})" for k, n in self.workloads.items())
            return (f"the simulation table holds no record of workload {workload_key} (it holds "
                    f"{known}); tune the same function on the same target, or sweep this one first")
        n = sum(k == workload_key for k, _ in self.table)
        return (f"schedule {sch_hash} of {name} is not in the simulation table ({n} schedules of "
                f"it); sweep more of the space, or pass on_missing='measure' to measure what the "
                "table lacks")


def answer(record: TuningRecord) -> RunnerResult:
    """What a stored record says, as a runner's result: its times or its failure."""
    measure = {k: v for k, v in record.measure.items() if k != "run"}
    return RunnerResult(run_secs=record.run_secs, error_class=record.error_class,
                        error_msg=record.error_msg,
                        aborted_early=bool(record.measure.get("aborted_early")),
                        measure={**measure, "simulated": True})


def _newest(records) -> TuningRecord:
    return max(enumerate(records), key=lambda ir: (ir[1].time, ir[0]))[1]


def _describe(database) -> str:
    where = getattr(database, "path", None) or getattr(database, "work_dir", None)
    return f"the database {where}" if where else "the database"


def simulate(func, runner: SimulatedRunner, *, strategies=("replay-trace", "evolutionary"),
             seeds=range(10), max_trials: int, num_trials_per_iter: int = 16, into=None,
             **kwargs) -> Database:
    """Tune `func` once per (strategy, seed) over `runner`'s table, each run in a fresh
    MemoryDatabase, and gather every run's records in `into` (a Database; default a new
    MemoryDatabase), each record saying its run, strategy and seed (`measure["run"]`), for
    `looptune.report`. A strategy is a name, a dict of tune_tir keyword arguments (e.g.
    {"strategy": "evolutionary", "cost_model": "mlp"}), or a SearchStrategy factory (a
    callable with no arguments). "evolutionary" runs without `max_search_share`, since
    simulated measurements take no time. `kwargs` go to tune_tir."""
    from ..database.memory import MemoryDatabase
    from ..tune import tune_tir
    into = MemoryDatabase() if into is None else into
    into.commit_workload(func)
    for spec in strategies:
        for seed in seeds:
            run_db = MemoryDatabase()
            tune_tir(func, runner.target, database=run_db, max_trials_global=max_trials,
                     num_trials_per_iter=num_trials_per_iter, seed=seed, runner=runner,
                     progress=False, **_strategy_kwargs(spec), **kwargs)
            for rec in run_db.get_all_tuning_records():
                into.commit_tuning_record(rec)
    return into


def _strategy_kwargs(spec) -> dict:
    """tune_tir's keyword arguments for one strategy of `simulate`."""
    if callable(spec) and not isinstance(spec, (str, dict)):
        return {"strategy": spec()}
    kw = dict(spec) if isinstance(spec, dict) else {"strategy": spec}
    if kw.get("strategy", "evolutionary") == "evolutionary":
        from ..search_strategy.evolutionary import EvolutionarySearch
        kw["strategy"] = EvolutionarySearch(cost_model=kw.pop("cost_model", None) or "xgb",
                                            max_search_share=None)
    return kw

