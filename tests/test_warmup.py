"""The warm-up round of a many-task tuning run (pure Python: a fake space, strategy, builder
and timer): every task gets a first batch sized by the budget and its share of the model's
time, the gradient scheduler takes over after it, a budget that cannot cover the tasks says so
before the first trial, and the progress line counts the tasks touched."""
from __future__ import annotations

import re
import warnings
from collections import Counter

import pytest

from looptune import te
from looptune.schedule import Schedule
from looptune.te.ops import workload
from looptune.tune import (BudgetWarning, Builder, BuilderResult, MemoryDatabase, Runner,
                           RunnerResult, tune_tasks)
from looptune.tune.context import TuneContext
from looptune.tune.progress import Progress
from looptune.tune.search_strategy.base import MeasureCandidate, SearchStrategy
from looptune.tune.space_generator.base import SpaceGenerator
from looptune.tune.task_scheduler import plan_warmup


class NoSpace(SpaceGenerator):
    def generate_design_space(self, func, seed):
        return []


class Candidate(MeasureCandidate):
    def lowered(self, target):
        return None


class Numbered(SearchStrategy):
    """Candidate k of a task is the unscheduled function under the hash "<task>/<k>"."""

    def pre_tuning(self, *, max_trials, num_trials_per_iter, design_spaces, database, seen):
        self.max_trials, self.per_iter, self.trials = max_trials, num_trials_per_iter, 0
        self.batches = []

    def generate_measure_candidates(self, n=None):
        n = min(n or self.per_iter, self.max_trials - self.trials)
        if n <= 0:
            return None
        name = self.context.task_name
        out = [Candidate(Schedule(self.context.func), f"{name}/{self.trials + i}")
               for i in range(n)]
        self.trials += n
        self.batches.append(n)
        return out


class HashBuilder(Builder):
    def build(self, inputs):
        return [BuilderResult(artifact=str(i), symbol="k", source_hash=f"{id(inp)}")
                for i, inp in enumerate(inputs)]


class Timer(Runner):
    """A fake timer: task t's default schedule takes base[t]; its k-th candidate
    base[t] * (0.6 + 0.8 / (k + 2)), so every task improves on its default with trials."""

    def __init__(self, base: dict, log: list | None = None):
        self.base, self.log = base, log

    def run(self, inputs):
        if self.log is not None:
            self.log.append(inputs[0].sch_hash)
        out = []
        for inp in inputs:
            name, _, k = inp.sch_hash.partition("/")
            if not k:  # a structural hash: the default schedule
                t = self.base[self._task[inp.workload_key]]
            else:
                t = self.base[name] * (0.6 + 0.8 / (int(k) + 2))
            out.append(RunnerResult(run_secs=(t,)))
        return out


def many_tasks(n: int):
    """n distinct small workloads; the later ones take longer by default (a larger share)."""
    funcs = [te.create_prim_func(workload("matmul", M=4, N=4, K=k + 1)[0]) for k in range(n)]
    return [TuneContext(f, "cpu", NoSpace(), Numbered(), task_name=f"t{i}", seed=i)
            for i, f in enumerate(funcs)]


def run(n_tasks, budget, *, per_iter=64, weights=None, base=None, log=None, scheduler="gradient",
        progress=False, max_time_s=None):
    ctxs = many_tasks(n_tasks)
    base = base or {c.task_name: 1e-4 * (1 + i) for i, c in enumerate(ctxs)}
    timer = Timer(base, log)
    db = MemoryDatabase()
    timer._task = {db.commit_workload(c.func).key: c.task_name for c in ctxs}
    tune_tasks(ctxs, database=db, max_trials_global=budget, num_trials_per_iter=per_iter,
               task_weights=weights, builder=HashBuilder(), runner=timer,
               task_scheduler=scheduler, check_correctness=False, progress=progress,
               default_schedule=lambda func, target: Schedule(func), max_time_s=max_time_s)
    trials = Counter(r.measure["run"]["task"] for r in db.get_all_tuning_records()
                     if not r.baseline)
    return ctxs, db, trials


def test_a_small_budget_reaches_every_task_and_the_gradient_engages():
    # MobileNetV2's case: 40 tasks, 500 trials. Before, the warm-up gave the first 7 tasks
    # 64 trials each and nothing to the other 33.
    ctxs, db, trials = run(40, 500)
    assert sum(trials.values()) == 500
    assert len(trials) == 40 and min(trials.values()) >= 4
    first = {c.task_name: c.search_strategy.batches[0] for c in ctxs}
    assert sum(first.values()) <= 250 + 40  # about half the budget for the warm-up
    assert first["t39"] > first["t0"]       # the largest share gets the largest first batch
    # the gradient scheduler spends the rest: tasks got second batches
    assert sum(len(c.search_strategy.batches) > 1 for c in ctxs) >= 5
    # baselines: one per task, not trials
    assert sum(r.baseline for r in db.get_all_tuning_records()) == 40


def test_a_time_budget_plans_the_warm_up_for_the_trials_that_fit_it():
    # 100000 trials but one second at 5 ms a trial (about 200 trials): the warm-up covers all
    # 40 tasks with small first batches, not 64 each for the first ones until time runs out
    from looptune.tune.task_scheduler import GradientBased
    ctxs, _, trials = run(40, 100000, max_time_s=1.0,
                          scheduler=GradientBased(seconds_per_trial=0.005))
    first = [c.search_strategy.batches[0] for c in ctxs if c.search_strategy.batches]
    assert len(first) == 40 and max(first) < 64 and sum(first) <= 200


def test_shares_follow_the_measured_default_times_and_weights():
    # t0's default schedule is by far the slowest: it leads the warm-up with the largest batch
    base = {f"t{i}": 1e-5 for i in range(10)} | {"t0": 1e-2}
    log: list = []
    ctxs, _, _ = run(10, 100, base=base, log=log)
    candidates = [h for h in log if "/" in h]
    assert candidates[0].startswith("t0/")
    assert ctxs[0].search_strategy.batches[0] > ctxs[1].search_strategy.batches[0]
    # weights count too: t5 runs 50 times per inference
    ctxs, _, _ = run(10, 100, weights=[1] * 5 + [50] + [1] * 4)
    assert max(ctxs, key=lambda c: c.search_strategy.batches[0]).task_name == "t5"


def budget_warnings(n_tasks, budget, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ctxs, _, trials = run(n_tasks, budget, **kw)
    return [str(w.message) for w in caught if issubclass(w.category, BudgetWarning)], trials


def test_a_budget_that_cannot_cover_the_tasks_says_so():
    # fewer trials than tasks: the largest shares get one trial each, the rest none
    [msg], trials = budget_warnings(40, 32)
    assert "cannot cover the 40 tasks" in msg and "one trial each" in msg
    assert "leaves 8 on their default schedules" in msg
    assert "max_trials_global=160" in msg and "(t39, t38," in msg  # largest shares named
    assert sorted(trials) == sorted(f"t{i}" for i in range(8, 40))  # the 32 it names
    assert set(trials.values()) == {1}
    # enough for a trial each, not for the first batch of 4 each task should get
    [msg], trials = budget_warnings(40, 100)
    assert "gives each of the 40 tasks only 2 trials" in msg and "max_trials_global=160" in msg
    assert len(trials) == 40
    # enough: nothing to say; nor for one task, whatever its budget
    assert budget_warnings(40, 160)[0] == []
    [msg], _ = budget_warnings(1, 3)  # one kernel: too few trials for the search to help
    assert "3 trials is too small" in msg and "max_trials_global=16" in msg
    assert budget_warnings(1, 16)[0] == []
    # nor when every task was tried before (a resumed run): no warm-up to plan
    plan = plan_warmup([1.0, 2.0], [0, 0], budget=3, per_iter=64)
    assert plan.covered and plan.shortfall(["a", "b"]) is None and plan.first == (0, 0)


def test_the_warning_comes_before_any_trial():
    seen_at_first_run = []

    class Watching(Timer):
        def run(self, inputs):
            if "/" in inputs[0].sch_hash and not seen_at_first_run:
                seen_at_first_run.append(len(caught))
            return super().run(inputs)

    ctxs = many_tasks(6)
    db = MemoryDatabase()
    timer = Watching({c.task_name: 1e-4 for c in ctxs})
    timer._task = {db.commit_workload(c.func).key: c.task_name for c in ctxs}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tune_tasks(ctxs, database=db, max_trials_global=8, num_trials_per_iter=64,
                   builder=HashBuilder(), runner=timer, check_correctness=False,
                   progress=False, default_schedule=lambda func, target: Schedule(func))
    assert seen_at_first_run == [1]


def test_a_single_task_keeps_its_full_batches():
    # `looptune tune matmul --trials 64`: one task, one batch of 64
    ctxs, _, trials = run(1, 64)
    assert ctxs[0].search_strategy.batches == [64] and trials["t0"] == 64
    ctxs, _, _ = run(1, 200, per_iter=64)
    assert ctxs[0].search_strategy.batches == [64, 64, 64, 8]


def test_a_large_budget_gives_every_task_a_full_first_batch():
    ctxs, _, _ = run(4, 4 * 64 * 2)
    assert [c.search_strategy.batches[0] for c in ctxs] == [64] * 4


def test_round_robin_uses_the_warm_up_sizes_too():
    ctxs, _, trials = run(20, 200, scheduler="round-robin")
    assert len(trials) == 20 and sum(trials.values()) == 200
    assert all(c.search_strategy.batches[0] < 64 for c in ctxs)


def test_plan_warmup_is_pure_arithmetic():
    plan = plan_warmup([1.0, 1.0, 2.0], [99, 99, 99], budget=30, per_iter=64)
    assert plan.order == (2, 0, 1) and sum(plan.first) == 15 and min(plan.first) >= 4
    assert plan.first[2] > plan.first[0] and plan.batch == 10 and plan.covered
    # a task tried before (cap 0) gets no warm-up batch
    plan = plan_warmup([1.0, 1.0], [0, 99], budget=10, per_iter=64)
    assert plan.first == (0, 10) and plan.order == (1,)
    plan = plan_warmup([3.0, 2.0, 1.0], [99] * 3, budget=2, per_iter=64)
    assert plan.first == (1, 1, 0) and not plan.covered
    assert "max_trials_global=12" in plan.shortfall(["a", "b", "c"])


def test_progress_line_counts_the_tasks_touched(capsys):
    import io
    out = io.StringIO()
    p = Progress(500, None, stream=out)
    p.update(task="conv", done=40, best_secs=1e-3, flops=None, failures=0, tasks=(23, 40))
    assert "tasks 23/40" in out.getvalue()
    out = io.StringIO()
    p = Progress(64, None, stream=out)
    p.update(task="mm", done=8, best_secs=None, flops=None, failures=0, tasks=(1, 1))
    assert "tasks" not in out.getvalue()  # one task: nothing to count
    # in a run: the line counts the tasks with a trial so far, and the plan is said first
    run(12, 60, progress=True)
    err = capsys.readouterr().err
    assert err.index("warm-up: 12 of 12 untried tasks") < err.index("tasks 1/12")
    touched = [int(m) for m in re.findall(r"tasks (\d+)/12", err)]
    assert touched == sorted(touched)


@pytest.mark.parametrize("budget", [1, 3])
def test_tiny_budgets_still_measure(budget):
    with pytest.warns(BudgetWarning):
        _, _, trials = run(5, budget)
    assert sum(trials.values()) == budget and trials["t4"] >= 1


def test_a_rerun_adds_missing_baselines_without_spending_trials():
    ctxs = many_tasks(3)
    db = MemoryDatabase()
    timer = Timer({c.task_name: 1e-4 for c in ctxs})
    timer._task = {db.commit_workload(c.func).key: c.task_name for c in ctxs}
    kw = dict(database=db, max_trials_global=12, num_trials_per_iter=4, builder=HashBuilder(),
              runner=timer, check_correctness=False, progress=False)
    tune_tasks(ctxs, **kw)  # tune_tir-style: no baselines
    assert not any(r.baseline for r in db.get_all_tuning_records())
    tune_tasks(many_tasks(3), default_schedule=lambda func, target: Schedule(func), **kw)
    records = db.get_all_tuning_records()
    assert sum(r.baseline for r in records) == 3 and sum(not r.baseline for r in records) == 12
    tune_tasks(many_tasks(3), default_schedule=lambda func, target: Schedule(func), **kw)
    assert len(db.get_all_tuning_records()) == 15  # measured once per settings


class Few(Numbered):
    """A design space of five schedules: the search stops there, whatever the budget."""

    def generate_measure_candidates(self, n=None):
        if self.trials >= 5:
            self.stop_reason = "the design space holds 5 distinct schedules"
            return None
        return super().generate_measure_candidates(min(n or self.per_iter, 5 - self.trials))


def test_a_task_that_stops_before_its_budget_says_why(capsys):
    ctx = TuneContext(te.create_prim_func(workload("matmul", M=4, N=4, K=3)[0]), "cpu",
                      NoSpace(), Few(), task_name="small", seed=0)
    db = MemoryDatabase()
    timer = Timer({"small": 1e-4})
    timer._task = {db.commit_workload(ctx.func).key: "small"}
    tune_tasks([ctx], database=db, max_trials_global=64, builder=HashBuilder(), runner=timer,
               check_correctness=False, progress=True,
               default_schedule=lambda func, target: Schedule(func))
    err = capsys.readouterr()
    assert ("small: stopped after 5 trials: the design space holds 5 distinct schedules"
            in err.out + err.err)
