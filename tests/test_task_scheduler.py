"""Task schedulers (pure Python, simulated tuning progress): round-robin honours weights, the
gradient scheduler gives more trials to the task whose weighted gain is larger."""
from __future__ import annotations

import math
from collections import Counter

import pytest

from looptune.tune.task_scheduler import GradientBased, RoundRobin, TaskScheduler, TaskState


def simulate(scheduler, weights, curves, batches=40, per_batch=8):
    """curves[i](trials) -> best seconds of task i after that many trials."""
    scheduler.tasks = [TaskState(context=None, weight=w) for w in weights]
    picks = Counter()
    for _ in range(batches):
        i = scheduler.next_task_id()
        picks[i] += 1
        t = scheduler.tasks[i]
        t.trials += per_batch
        t.best_secs = curves[i](t.trials)
    return picks


def test_round_robin_honours_weights():
    flat = lambda n: 1.0  # noqa: E731
    picks = simulate(RoundRobin(), [1, 3], [flat, flat], batches=40)
    assert picks == {0: 10, 1: 30}
    picks = simulate(RoundRobin(), [1, 1, 1], [flat] * 3, batches=30)
    assert picks == {0: 10, 1: 10, 2: 10}


def test_round_robin_skips_finished_tasks():
    rr = RoundRobin()
    rr.tasks = [TaskState(None), TaskState(None)]
    rr.tasks[0].done = True
    assert {rr.next_task_id() for _ in range(4)} == {1}
    rr.tasks[1].done = True
    assert rr.next_task_id() == -1


def improving(start, rate):
    return lambda n: start * math.exp(-rate * n) + 0.1 * start


def test_gradient_gives_more_trials_to_the_larger_weighted_gain():
    # task 0 keeps improving fast; task 1 is flat after its first batch
    picks = simulate(GradientBased(eps=0.0), [1, 1],
                     [improving(10e-3, 0.02), improving(10e-3, 5.0)], batches=30)
    assert picks[0] > 1.5 * picks[1]
    assert picks[1] >= 1  # every task gets a first batch


def test_gradient_weights_matter():
    same = improving(10e-3, 0.02)
    picks = simulate(GradientBased(eps=0.0), [1, 8], [same, same], batches=30)
    assert picks[1] > 2 * picks[0]


def test_gradient_prefers_a_task_with_nothing_valid_yet():
    g = GradientBased(eps=0.0)
    g.tasks = [TaskState(None), TaskState(None)]
    for _ in range(2):  # both get their first batch
        i = g.next_task_id()
        g.tasks[i].trials += 8
        g.tasks[i].best_secs = 1e-3 if i == 0 else math.inf
    assert g.next_task_id() == 1


def test_scheduler_registry_and_bad_options():
    assert isinstance(TaskScheduler.create("gradient"), GradientBased)
    with pytest.raises(ValueError, match="alpha"):
        GradientBased(alpha=2)
