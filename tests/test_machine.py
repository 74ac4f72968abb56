"""The hardware fingerprint stored with every record (target/machine.py): records timed on
different kinds of machine never rank together."""
import numpy as np

from looptune import te
from looptune.target.machine import describe, fingerprint_id, machine_fingerprint, machine_id
from looptune.tune.database import MemoryDatabase
from looptune.tune.database.base import TuningRecord, measure_settings, rank
from looptune.tune.runner.base import EvaluatorConfig
from looptune.schedule import Schedule
from looptune.target import host


def test_fingerprint_names_this_machine():
    fp = machine_fingerprint()
    assert set(fp) == {"id", "cpu", "isa", "cores", "gpu"}
    assert fp["cores"] >= 1 and fp["isa"] == sorted(fp["isa"]) and fp["cpu"]
    assert fp["id"] == fingerprint_id(fp["cpu"], fp["isa"], fp["cores"], fp["gpu"])
    assert fp["id"] != fingerprint_id(fp["cpu"], fp["isa"], fp["cores"] + 1, fp["gpu"])
    assert fp["id"] in describe(fp) and f"{fp['cores']} cores" in describe(fp)
    # settings and legacy records that name no machine count as timed here
    assert machine_id({}) == machine_id(None) == fp["id"]
    assert measure_settings(EvaluatorConfig()) == measure_settings(
        {**EvaluatorConfig().to_json(), "machine": fp})


def _records():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    func = te.create_prim_func([A, B])
    db = MemoryDatabase()
    wl = db.commit_workload(func)
    trace = Schedule(func).trace
    here, there = machine_fingerprint(), {**machine_fingerprint(), "id": "0" * 16,
                                          "cpu": "Other CPU"}
    base = EvaluatorConfig().to_json()
    recs = [TuningRecord(wl, trace, (s,), host(), measure={**base, "machine": m})
            for s, m in ((3e-6, here), (1e-6, there), (2e-6, here))]
    return recs, here, there


def test_records_of_other_machines_never_rank_with_ours():
    recs, here, there = _records()
    mine = rank(recs, 5, EvaluatorConfig())  # the tuner's settings: this machine
    assert [r.median_secs for r in mine] == [2e-6, 3e-6]
    theirs = rank(recs, 5, {**EvaluatorConfig().to_json(), "machine": there})
    assert [r.median_secs for r in theirs] == [1e-6]
    # round-trips through JSON with the fingerprint
    back = TuningRecord.from_json(recs[1].to_json(), recs[1].workload)
    assert back.measure["machine"]["id"] == "0" * 16
    assert np.isclose(back.median_secs, 1e-6)


def test_a_report_names_the_machine_of_each_group_of_records():
    """One workload timed on two kinds of machine is two tasks in a report, each named with
    its machine (the same settings otherwise), and each says what machine measured it."""
    from looptune.report.data import collect
    from looptune.report.text import facts
    recs, here, there = _records()
    tasks = collect(recs)
    assert len(tasks) == 2
    names = [t.name for t in tasks]
    assert names[0] != names[1]
    assert here["id"] in names[0] and "Other CPU" in names[1] and there["id"] in names[1]
    assert [dict(facts(t))["measured on"] for t in tasks] == [describe(here), describe(there)]
