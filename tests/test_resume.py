"""Kill a tuning run with SIGKILL at random moments, several times, and resume it: no
completed record is lost, the database always opens, and the run finishes its budget
(looptune/testing/soak.py; benchmarks/reliability.py runs the same soak)."""
from __future__ import annotations

import pytest

from looptune.testing.soak import kill_soak

pytestmark = pytest.mark.cc


def check(r, kills: int) -> None:
    assert r.kills == kills, r.error
    assert r.lost == 0, "a completed record was lost"
    assert not r.failed_opens and not r.not_ok, (r.failed_opens, r.not_ok)
    assert not r.skipped, r.skipped  # every record still parses
    assert r.finished and r.final_records == r.trials, r.error  # earlier records count
    assert r.duplicates == 0  # nothing measured twice


def test_sigkill_at_random_moments_then_resume(tmp_path):
    r = kill_soak(tmp_path, kills=3, seed=0)
    check(r, 3)
    assert r.kills_while_tuning >= 1


@pytest.mark.slow
def test_kill_soak_20_kills(tmp_path):
    r = kill_soak(tmp_path, kills=20, seed=1)
    check(r, 20)
    assert r.kills_while_tuning >= 10  # every other kill follows a commit
