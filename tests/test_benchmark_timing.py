"""benchmarks/_common.py's interleaved timing: every callable is timed in every round, the
order reversed every other round, and each gets the median of its own rounds; a self-timed
one (a record's protocol) reports its own time. Run in a
child interpreter: the module sets single-threaded BLAS variables for the benchmarks, which
must not leak into this test process. No time is measured here (fake timings)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"

CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import _common
calls = []
fake = {"ours": iter([5.0, 1.0, 3.0, 9.0, 2.0]), "lib": iter([4.0, 4.0, 8.0, 1.0, 6.0])}
own = iter([7.0, 6.0, 0.5, 6.5, 9.0])
def record():
    calls.append("record")
    return next(own)
def timed(fn, *, repeat, min_time):
    name = fn()
    calls.append(name)
    return next(fake[name])
_common.median_seconds = timed
out = _common.interleaved_seconds({"ours": lambda: "ours", "lib": lambda: "lib",
                                   "record": record}, rounds=5, self_timed=("record",))
print(json.dumps({"calls": calls, "out": out}))
"""


def test_interleaved_seconds_alternates_the_order_and_takes_each_median():
    proc = subprocess.run([sys.executable, "-c", CHILD, str(BENCHMARKS)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    forward, backward = ["ours", "lib", "record"], ["record", "lib", "ours"]
    assert got["calls"] == forward + backward + forward + backward + forward
    # a self-timed callable's own figure is its time (a record's protocol returns its median)
    assert got["out"] == {"ours": 3.0, "lib": 4.0, "record": 6.5}
