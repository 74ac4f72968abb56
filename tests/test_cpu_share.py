"""Building the next candidates while one is measured (tune/cpu_share.py): the measuring CPU
runs nothing else while a measurement runs, the other CPUs keep compiling, and everything is
put back as it was after a batch, a Ctrl-C included."""
from __future__ import annotations

import os
import threading
import time

import pytest

from looptune.runtime import process
from looptune.target import Target
from looptune.testing.faults import matmul_func
from looptune.tune import tune_tir
from looptune.tune.builder import LocalBuilder
from looptune.tune.cpu_share import CpuShare, plan
from looptune.tune.runner import EvaluatorConfig, LocalRunner

ONE_THREAD = EvaluatorConfig(number=1, repeat=3, min_repeat_ms=5.0, num_threads=1)
two_cpus = pytest.mark.skipif(not hasattr(os, "sched_setaffinity")
                              or len(os.sched_getaffinity(0)) < 2,
                              reason="needs two CPUs and per-thread affinity (Linux)")


# ------------------------------------------------------------------ the share (pure Python)
def _started(fn):
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_the_measuring_cpus_are_lent_only_while_the_tuner_waits_and_a_measurement_waits_for_them():
    share = CpuShare(frozenset({1}), frozenset({0}))
    assert share.lend()  # before anything is measured: lent
    events = []

    def measure():
        with share.measuring_now():
            events.append("measured")
    t = _started(measure)
    time.sleep(0.2)
    assert events == []  # the lent compile still runs
    share.give_back()
    t.join(5)
    assert events == ["measured"]

    got = []
    t = _started(lambda: got.append(share.lend()))  # after a measurement: not lent ...
    time.sleep(0.2)
    assert got == []
    with share.idle():  # ... until the tuner waits for its next build
        t.join(5)
        assert got == [True]
    share.give_back()
    t = _started(lambda: got.append(share.lend()))
    time.sleep(0.1)
    share.close()  # the batch is over: a waiting lender gets False
    t.join(5)
    assert got == [True, False]


def test_a_share_is_planned_only_where_measurements_leave_cpus_free():
    cpu = Target.create("cpu")
    builder, runner = LocalBuilder(), LocalRunner()
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    assert plan(builder, runner, None, cpu) is None  # every CPU measures
    assert plan(builder, runner, n, cpu) is None
    assert plan(object(), runner, 1, cpu) is None    # a builder that cannot stream
    assert plan(builder, object(), 1, cpu) is None   # a runner that cannot be pinned

    class Overrides(LocalBuilder):
        def build(self, inputs):
            return super().build(inputs)
    assert plan(Overrides(), runner, 1, cpu) is None
    if n >= 2 and hasattr(os, "sched_setaffinity"):
        share = plan(builder, runner, 1, cpu)
        assert len(share.measuring) == 1 and share.measuring | share.others == set(
            os.sched_getaffinity(0)) and not share.measuring & share.others


# ------------------------------------------------------------------ tuning with a C compiler
class RecordingBuilder(LocalBuilder):
    """Notes when each compile ran and on which CPUs it could run."""

    def __init__(self):
        super().__init__(max_workers=2)
        self.compiles: list = []  # (start, end, CPUs)
        self._lock = threading.Lock()

    def _compile(self, inp, source):
        cpus = frozenset(os.sched_getaffinity(0))  # this thread's: the compiler's
        t0 = time.monotonic()
        out = super()._compile(inp, source)
        with self._lock:
            self.compiles.append((t0, time.monotonic(), cpus))
        return out


class RecordingRunner(LocalRunner):
    """Notes when each measurement ran, on which CPUs its worker could run, and on which the
    tuner's own thread could; raises KeyboardInterrupt at measurement `interrupt_at`."""

    def __init__(self, interrupt_at=None):
        super().__init__()
        self.runs: list = []  # (start, end, worker CPUs, tuner thread CPUs)
        self.interrupt_at = interrupt_at

    def run(self, inputs):
        if self.interrupt_at is not None and len(self.runs) == self.interrupt_at:
            raise KeyboardInterrupt
        w = self._live_worker()
        worker_cpus = frozenset(os.sched_getaffinity(w.proc.pid))
        t0 = time.monotonic()
        out = super().run(inputs)
        self.runs.append((t0, time.monotonic(), worker_cpus, frozenset(os.sched_getaffinity(0))))
        return out


@pytest.mark.cc
@two_cpus
def test_candidates_are_measured_while_the_next_compile_on_the_other_cpus(tmp_path):
    before = os.sched_getaffinity(0)
    builder, runner = RecordingBuilder(), RecordingRunner()
    db = tune_tir(matmul_func(), "cpu", str(tmp_path), max_trials_global=24,
                  num_trials_per_iter=12, seed=0, builder=builder, runner=runner,
                  evaluator=ONE_THREAD, progress=False)
    records = [r for r in db.get_all_tuning_records() if not r.baseline]
    assert len(records) == 24 and all(r.ok for r in records)  # each checked by the runner
    measuring = frozenset({max(before)})
    batch_runs = [r for r in runner.runs if r[2] == measuring]
    assert len(batch_runs) >= 24  # the candidates (the reference build is not measured)
    for start, end, _, tuner_cpus in batch_runs:
        assert tuner_cpus == frozenset(before) - measuring  # the tuner keeps off its CPU
        for c0, c1, cpus in builder.compiles:
            if c0 < end and start < c1:  # ran at the same time
                assert not cpus & measuring, "a compile shared the measuring CPU"
    overlapped = sum(any(c0 < end and start < c1 for c0, c1, _ in builder.compiles)
                     for start, end, _, _ in batch_runs)
    assert overlapped >= 2  # the other CPU compiled while candidates were measured
    lent = [c for c in builder.compiles if c[2] == measuring]
    assert lent  # and the measuring CPU compiled while nothing was measured
    assert os.sched_getaffinity(0) == before  # afterwards: this thread runs anywhere again


@pytest.mark.cc
@two_cpus
def test_a_pinned_runner_pins_its_worker_and_the_next_one_and_unpins_them():
    everywhere = os.sched_getaffinity(0)
    one = {max(everywhere)}
    with LocalRunner() as runner:
        first = runner._live_worker()
        runner.pin(one)
        assert os.sched_getaffinity(first.proc.pid) == one
        runner._discard()  # a crashed kernel's worker is replaced: the new one is pinned too
        second = runner._live_worker()
        assert second is not first and os.sched_getaffinity(second.proc.pid) == one
        runner.pin(None)
        assert os.sched_getaffinity(second.proc.pid) == everywhere


@pytest.mark.cc
@two_cpus
def test_ctrl_c_while_a_batch_streams_stops_its_compiles_and_restores_the_cpus(tmp_path):
    before = os.sched_getaffinity(0)
    builder, runner = RecordingBuilder(), RecordingRunner(interrupt_at=3)
    with pytest.raises(KeyboardInterrupt):
        tune_tir(matmul_func(), "cpu", str(tmp_path), max_trials_global=24,
                 num_trials_per_iter=24, seed=0, builder=builder, runner=runner,
                 evaluator=ONE_THREAD, progress=False)
    assert os.sched_getaffinity(0) == before
    assert not [t for t in threading.enumerate() if t.name == "looptune-build"]
    assert not process._transient  # no compiler left running
    assert len(builder.compiles) < 24  # the rest of the batch was never compiled
    runner.close()
