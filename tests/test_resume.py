"""Kill a tuning run with SIGKILL at random moments, several times, and resume it: no
completed record is lost, the database always opens, and the run finishes its budget."""
from __future__ import annotations

import random
import subprocess
import sys
import time

import pytest

from looptune.tune.database import SQLiteDatabase

pytestmark = pytest.mark.cc

SCRIPT = """
import sys
from looptune import te
from looptune.te.ops import workload
from looptune.tune import EvaluatorConfig, tune_tir
func = te.create_prim_func(workload("matmul", M=24, N=32, K=16)[0])
tune_tir(func, "cpu", sys.argv[1], max_trials_global=24, num_trials_per_iter=4, seed=5,
         evaluator=EvaluatorConfig(num_threads=1, repeat=2, min_repeat_ms=1), progress=False)
"""


def records(work_dir):
    db = SQLiteDatabase(work_dir=str(work_dir))
    try:
        return db.get_all_tuning_records()
    finally:
        db.close()


def test_sigkill_at_random_points_then_resume(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    work = tmp_path / "work"
    rng = random.Random(0)
    seen: set = set()
    kills = 0
    for _ in range(4):
        p = subprocess.Popen([sys.executable, str(script), str(work)])
        time.sleep(rng.uniform(1.0, 4.0))
        if p.poll() is None:
            p.kill()
            kills += 1
        p.wait()
        if not (work / "database.sqlite").exists():
            continue
        now = {r.sch_hash for r in records(work)}
        assert seen <= now, "a completed record was lost"
        seen = now
    assert kills >= 2
    done = subprocess.run([sys.executable, str(script), str(work)], timeout=600)
    assert done.returncode == 0
    final = records(work)
    assert len(final) == 24  # the budget, counting what the killed runs measured
    assert len({r.sch_hash for r in final}) == 24  # nothing measured twice
    assert seen <= {r.sch_hash for r in final}
