"""`looptune report`: the figures computed from records (best so far, trials to 90/95/99%,
runs and strategies), the PNG and the self-contained HTML page, and the page in Chromium."""
from __future__ import annotations

import math
import subprocess

import pytest

from looptune import te
from looptune.cli import main
from looptune.report import (best_so_far, collect, strategy_curve, summary,
                             trials_to_fraction)
from looptune.schedule import Schedule
from looptune.target import Target
from looptune.te.ops import workload
from looptune.tune import EvaluatorConfig, MemoryDatabase, SQLiteDatabase, TuningRecord

TARGET = Target.create("cpu")


def func_of(name="matmul", **shape):
    return te.create_prim_func(workload(name, **(shape or dict(M=8, N=8, K=8)))[0])


def add_run(db, func, secs, *, strategy="replay-trace", seed=0, run_id=None, t0=1000.0,
            evaluator=EvaluatorConfig(num_threads=1), run=True):
    """Commit one run's records: a number is a time in seconds, a string an error class.
    Record i is made at t0 + i seconds of a run that started at t0 - 1."""
    wl = db.commit_workload(func)
    sch = Schedule(func)
    sch.split(sch.get_loops(sch.get_block("matmul"))[0], [None, 2])
    info = {"id": run_id or f"{strategy}-{seed}", "start": t0 - 1, "task": func.name,
            "strategy": strategy, "seed": seed}
    for i, s in enumerate(secs):
        failed = isinstance(s, str)
        measure = {**evaluator.to_json(), "aborted_early": False}
        if run:
            measure["run"] = info
        db.commit_tuning_record(TuningRecord(
            workload=wl, trace=sch.trace, run_secs=None if failed else (s, s, s), target=TARGET,
            measure=measure, error_class=s if failed else None,
            error_msg="boom" if failed else None, time=t0 + i, sch_hash=f"{info['id']}-{i}"))


# ---------------------------------------------------------------------------- figures
def test_best_so_far_and_trials_to_fractions_on_known_numbers():
    curve = best_so_far([10.0, math.inf, 4.0, 5.0, 1.2, 1.05, 1.0, 2.0])
    assert curve == [10.0, 10.0, 4.0, 4.0, 1.2, 1.05, 1.0, 1.0]
    # best 1.0: 90% needs <= 1.111 (trial 6), 95% <= 1.0526 (trial 6), 99% <= 1.0101 (trial 7)
    assert trials_to_fraction(curve) == {0.9: 6, 0.95: 6, 0.99: 7}
    # against a better best found elsewhere (0.5): 90% needs <= 0.556: never
    assert trials_to_fraction(curve, 0.5) == {0.9: None, 0.95: None, 0.99: None}
    assert trials_to_fraction(curve, 0.9, fractions=(0.9,)) == {0.9: 7}  # needs <= 1.0
    assert trials_to_fraction([math.inf, math.inf]) == {0.9: None, 0.95: None, 0.99: None}
    assert trials_to_fraction([]) == {0.9: None, 0.95: None, 0.99: None}


def test_collect_splits_runs_and_computes_trials_to_the_task_best():
    db = MemoryDatabase()
    f = func_of()
    add_run(db, f, [4.0, "build_error", 2.0, 1.1, 1.0], strategy="replay-trace", seed=0)
    add_run(db, f, [3.0, 0.9, "wrong_result", 0.8], strategy="evolutionary/xgb", seed=1,
            t0=2000.0)
    add_run(db, f, [5.0, 0.5], run=False, t0=10.0)  # written before runs were recorded
    (task,) = collect(db)
    assert task.name == "matmul" and len(task.records) == 11
    assert [r.label for r in task.runs] == ["replay-trace seed 0", "evolutionary/xgb seed 1",
                                            "earlier records (run not recorded)"]
    assert [len(r.records) for r in task.runs] == [5, 4, 2]
    assert task.best_secs == 0.5
    assert task.errors == {"build_error": 1, "wrong_result": 1}
    assert sorted(task.latencies) == [0.5, 0.8, 0.9, 1.0, 1.1, 2.0, 3.0, 4.0, 5.0]
    rt, evo, old = task.runs
    assert rt.curve() == [4.0, 4.0, 2.0, 1.1, 1.0]
    # against the task's best (0.5): 90% needs <= 0.5556, nobody but the old run gets there
    assert task.trials_to(rt) == {0.9: None, 0.95: None, 0.99: None}
    assert task.trials_to(old) == {0.9: 2, 0.95: 2, 0.99: 2}
    assert trials_to_fraction(evo.curve()) == {0.9: 4, 0.95: 4, 0.99: 4}  # its own best 0.8
    assert rt.elapsed() == [1.0, 2.0, 3.0, 4.0, 5.0]  # from the recorded start
    assert old.elapsed() == [0.0, 1.0]                 # from its first record
    assert set(task.strategies()) == {"replay-trace", "evolutionary/xgb", "unknown"}
    text = summary([task])
    assert "replay-trace seed 0" in text and "never" in text and "build_error 1" in text


def test_tasks_are_split_by_workload_and_by_measurement_settings():
    db = MemoryDatabase()
    f, g = func_of(), func_of(M=4, N=8, K=8)
    add_run(db, f, [2.0, 1.0])
    add_run(db, f, [3.0], evaluator=EvaluatorConfig(num_threads=2), run_id="two-threads")
    add_run(db, g, [1.0], run_id="g")
    tasks = collect(db)
    assert len(tasks) == 3
    assert "1 thread" in tasks[0].name and "2 threads" in tasks[1].name
    assert tasks[2].name == "matmul" and tasks[2].workload.key != tasks[0].workload.key


def test_strategy_curves_are_medians_over_runs():
    db = MemoryDatabase()
    f = func_of()
    for i, secs in enumerate([[4.0, 2.0, 1.0], [3.0, 3.0], [5.0, 1.0, 1.0]]):
        add_run(db, f, secs, seed=i)
    (task,) = collect(db)
    runs = task.runs
    med, lo, hi = strategy_curve(runs)
    assert med == [4.0, 2.0, 1.0]           # trial 3: only the two runs that got there
    assert lo == [3.5, 1.5, 1.0] and hi == [4.5, 2.5, 1.0]
    to = task.strategy_trials_to(runs)
    assert to[0.9] == (3, 2)                # median of (3, never, 2) is 3; two runs got there


def test_records_of_a_tuning_run_say_which_run_and_strategy_made_them():
    from test_tune import fake_tune, small
    db = MemoryDatabase()
    f = small()
    fake_tune(f, 8, db, seed=3, strategy="replay-trace")
    fake_tune(f, 16, db, seed=4, cost_model="random")
    runs = collect(db)[0].runs
    # the second call resumed the first (16 trials in all): it goes on from trial 9 and
    # from the first run's best, not from scratch
    assert [r.label for r in runs] == ["replay-trace seed 3",
                                       "evolutionary/random seed 4 (resumed after 8 trials)"]
    assert [len(r.records) for r in runs] == [8, 8]
    assert all(r.start is not None and r.start <= r.records[0].time for r in runs)
    assert list(runs[1].trial_numbers()) == list(range(9, 17))
    assert runs[1].curve()[0] <= runs[0].curve()[-1]


# ---------------------------------------------------------------------------- pictures
def report_db(path):
    db = SQLiteDatabase(work_dir=str(path))
    f, g = func_of(), func_of("relu", N=1, C=2, H=3, W=4)
    add_run(db, f, [4e-3, 2e-3, "run_timeout", 1e-3], seed=0)
    add_run(db, f, [3e-3, 1.5e-3, 1.2e-3], strategy="evolutionary/xgb", seed=1, t0=2000)
    db.commit_workload(g)
    sch = Schedule(g)
    db.commit_tuning_record(TuningRecord(db.commit_workload(g), sch.trace, (2e-6,), TARGET,
                                         measure={"run": {"id": "r", "task": "my_relu"}},
                                         sch_hash="x"))
    db.close()
    return path


def test_report_reads_several_work_dirs_together(tmp_path, capsys):
    a, b = SQLiteDatabase(work_dir=str(tmp_path / "a")), SQLiteDatabase(work_dir=str(tmp_path / "b"))
    add_run(a, func_of(), [3.0, 2.0], seed=0)
    add_run(b, func_of(), [1.5, 1.0], strategy="evolutionary/xgb", seed=1, t0=2000)
    a.close(), b.close()
    assert main(["report", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "replay-trace seed 0" in out and "evolutionary/xgb seed 1" in out


def test_one_line_per_run_or_per_strategy():
    pytest.importorskip("matplotlib")
    from looptune.report import task_figure
    db = MemoryDatabase()
    f = func_of()
    for seed in range(3):
        add_run(db, f, [3.0, 2.0, 1.0 + seed], seed=seed)
    add_run(db, f, [2.0, 0.5], strategy="evolutionary/xgb", seed=0)
    (task,) = collect(db)

    def labels(group):
        ax = task_figure(task, group).axes[0]
        return [ln.get_label() for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    assert labels("run") == ["replay-trace seed 0", "replay-trace seed 1", "replay-trace seed 2",
                             "evolutionary/xgb seed 0"]
    assert labels("strategy") == ["replay-trace (median of 3)", "evolutionary/xgb (median of 1)"]
    assert labels("auto") == labels("run")  # few runs: one line each


def test_the_histogram_counts_whole_records():
    pytest.importorskip("matplotlib")
    from looptune.report import task_figure
    db = MemoryDatabase()
    add_run(db, func_of(), [3.0, 2.0, 1.0])  # three records: matplotlib would tick 0.5s
    (task,) = collect(db)
    fig = task_figure(task)
    fig.canvas.draw()
    ticks = fig.axes[2].get_yticks()
    assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks


def test_report_command_writes_a_png_and_a_self_contained_page(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread
    work = report_db(tmp_path / "w")
    png, page = tmp_path / "r.png", tmp_path / "r.html"
    assert main(["report", str(work), "--png", str(png), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "matmul" in out and "my_relu" in out and "to 90%" in out and "run_timeout 1" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = imread(str(png))
    assert pixels.shape[1] == 1500 and pixels.shape[0] == 2 * 380  # 15 x 3.8 in per task, 100 dpi
    assert pixels.std() > 0.05  # not blank
    text = page.read_text()
    assert text.count('<img alt="') == 2 and text.count("data:image/png;base64,") == 2
    assert "http://" not in text and "https://" not in text and "<script" not in text
    assert "matmul" in text and "my_relu" in text and "sch.split(" in text
    assert "replay-trace seed 0" in text and "evolutionary/xgb seed 1" in text


def test_report_without_matplotlib_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    import sys
    work = report_db(tmp_path / "w")
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails
    assert main(["report", str(work), "--html", str(tmp_path / "r.html")]) == 2
    assert "pip install 'looptune[plot]'" in capsys.readouterr().err
    assert main(["report", str(work)]) == 0  # the text needs no matplotlib
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "no tuning database" in capsys.readouterr().err


@pytest.mark.browser
def test_the_page_loads_in_headless_chromium(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    from conftest import chromium
    work = report_db(tmp_path / "w")
    page = tmp_path / "r.html"
    assert main(["report", str(work), "--html", str(page)]) == 0
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu",
           f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*cmd, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    assert "<h2" in dom and "matmul" in dom and "my_relu" in dom
    assert dom.count("<img") == 2 and "best schedule" in dom
    shot = tmp_path / "shot.png"
    subprocess.run([*cmd, f"--screenshot={shot}", "--window-size=1200,1600", page.as_uri()],
                   capture_output=True, timeout=120)
    pixels = imread(str(shot))
    assert pixels.shape[:2] == (1600, 1200)
    assert pixels.std() > 0.05  # text and pictures, not a blank page
