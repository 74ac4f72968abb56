"""The Ray measurement farm on a real Ray cluster started here (a head and one more node, 1 CPU
and one measurement device each): RayBuilder/RayRunner results equal the local ones (times,
wrong results, build errors, crashes, timeouts), and a run survives a SIGKILLed device
worker and a removed node with every trial recorded exactly once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from looptune.target.machine import describe, machine_fingerprint
from looptune.testing.faults import FAULTS, inject, matmul_func
from looptune.tune import EvaluatorConfig, tune_tir
from looptune.tune.builder import BuilderInput, LocalBuilder, RayBuilder
from looptune.tune.cluster import DEVICE
from looptune.tune.error import TuneError
from looptune.tune.runner import LocalRunner, RayRunner, RunnerInput

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'looptune[cluster]')")
from ray.cluster_utils import Cluster  # noqa: E402

pytestmark = [pytest.mark.cc, pytest.mark.filterwarnings("ignore:a budget of")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = EvaluatorConfig(num_threads=1, repeat=2, min_repeat_ms=1)
SLOW = EvaluatorConfig(num_threads=1, repeat=5, min_repeat_ms=100)  # ~0.6 s a candidate
FAULT = {f.kind: f for f in FAULTS}
NODE = {"num_cpus": 1, "resources": {DEVICE: 1}, "object_store_memory": 200 * 2**20}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head and a second node; their kernel cache is not this process's (no file system
    is shared through it: kernels must travel as bytes)."""
    env = dict(os.environ)
    os.environ["LOOPTUNE_CACHE_DIR"] = str(tmp_path_factory.mktemp("node-cache"))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    try:
        c = Cluster(initialize_head=True,
                    head_node_args={**NODE, "include_dashboard": False})
        c.worker = c.add_node(**NODE)
        ray.init(address=c.address, log_to_driver=False)
        c.wait_for_nodes()
    finally:
        os.environ.clear()
        os.environ.update(env)
    yield c
    ray.shutdown()
    c.shutdown()


class Faulty:
    """A builder that puts the fault named by an input's meta["fault"] into its source."""

    def render(self, inp):
        symbol, source = super().render(inp)
        kind = inp.meta.get("fault")
        return symbol, inject(FAULT[kind], source, symbol, inp.func) if kind else source


class FaultyLocal(Faulty, LocalBuilder):
    pass


class FaultyRay(Faulty, RayBuilder):
    pass


def candidates():
    """A matmul's schedules: two good ones, and one each computing wrong values, crashing,
    hanging and not compiling."""
    import looptune as lt
    func = matmul_func()
    sch = lt.Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("matmul"))
    sch.split(j, [None, 8])
    kinds = [None, "wrong", "segfault", None, "hang", "compile_error"]
    funcs = [func if n % 3 == 0 else sch.func for n in range(len(kinds))]
    return func, [BuilderInput(f, lt.Target.create("cpu"), {"fault": kind} if kind else {})
                  for f, kind in zip(funcs, kinds)], kinds


def measure(builder, runner, func, inputs):
    from looptune.backend import args_info
    from looptune.target import Target
    ref = LocalBuilder().build([BuilderInput(func, Target.create("cpu"),
                                             {"trace": "unscheduled"})])[0]
    built = builder.build(inputs)
    ok = [b for b in built if b.ok]
    runs = iter(runner.run([RunnerInput(b.artifact, b.symbol, args_info(func), FAST, seed=3,
                                        reference=(ref.artifact, ref.symbol)) for b in ok]))
    return built, [next(runs) if b.ok else b for b in built]


def test_ray_results_equal_the_local_runners(cluster):
    func, inputs, kinds = candidates()
    local_built, local = measure(FaultyLocal(), LocalRunner(timeout_s=2.0), func, inputs)
    with RayRunner(timeout_s=2.0) as runner:
        ray_built, remote = measure(FaultyRay(), runner, func, inputs)
        dirs = [d.info["dir"] for d in runner._devices]
        assert dirs and all(os.path.isdir(d) for d in dirs)
    assert not [d for d in dirs if os.path.exists(d)]  # the actors removed their kernels
    expect = {None: None, "wrong": "wrong_result", "segfault": "run_error",
              "hang": "run_timeout", "compile_error": "build_error"}
    assert [r.error_class for r in local] == [expect[k] for k in kinds]
    assert [r.error_class for r in remote] == [r.error_class for r in local]
    for b in ray_built:  # the library came back as bytes into this process's own cache
        if b.ok:
            assert os.path.exists(b.artifact)
            assert b.artifact.startswith(os.environ["LOOPTUNE_CACHE_DIR"])
    here = machine_fingerprint()
    for lo, re_ in zip(local, remote):
        if getattr(re_, "run_secs", None):
            ratio = min(re_.run_secs) / min(lo.run_secs)
            assert 0.2 < ratio < 5, (lo.run_secs, re_.run_secs)  # a shared, noisy machine
            assert re_.machine["id"] == here["id"]  # the worker's fingerprint (same box)
    assert "differ from the reference" in remote[1].error_msg
    assert "SIGSEGV" in remote[2].error_msg


def test_timeouts_count_from_when_a_candidate_starts_not_when_it_was_queued(cluster):
    """Four hanging kernels queued on two devices before a good one: each hangs for its own
    timeout; the good one, queued for two of them, is measured, not timed out."""
    func, inputs, kinds = candidates()
    hang, good = inputs[4], inputs[0]
    with RayRunner(timeout_s=1.5) as runner:
        _, res = measure(FaultyRay(), runner, func, [hang] * 4 + [good])
    # identical hanging sources compile once but each input is measured
    assert [r.error_class for r in res] == ["run_timeout"] * 4 + [None]


def _tune(work_dir, runner, trials=8):
    db = tune_tir(matmul_func(), "cpu", str(work_dir), max_trials_global=trials,
                  num_trials_per_iter=4, seed=1, builder=RayBuilder(), runner=runner,
                  evaluator=SLOW, progress=False)
    records = [r for r in db.get_all_tuning_records() if not r.baseline]
    db.close()
    return records


def _when_busy(runner, act, *, node=None):
    """Call act(device) from a thread once a device (of `node`, if given) is measuring."""
    done = []

    def watch():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for d in runner.devices():
                if d["busy"] and (node is None or d["node"] == node):
                    time.sleep(0.2)  # well inside the candidate's ~0.6 s
                    act(d)
                    done.append(d)
                    return
            time.sleep(0.05)
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t, done


def _accounted_once(records, trials):
    assert len(records) == trials
    assert len({r.sch_hash for r in records}) == trials  # nothing measured twice
    assert all(r.ok for r in records), [r.error_msg for r in records if not r.ok]


def test_a_killed_device_worker_loses_no_trial(cluster, tmp_path):
    runner = RayRunner(timeout_s=10.0)
    t, killed = _when_busy(runner, lambda d: os.kill(d["pid"], signal.SIGKILL))
    try:
        records = _tune(tmp_path, runner)
    finally:
        runner.close()
    t.join()
    assert killed, "no device was ever busy"
    assert runner.requeued >= 1  # its candidate went to another device
    _accounted_once(records, 8)
    # the killed actor left its kernels' folder; the next actor to start on the node removes it
    from looptune.tune.runner.ray import _remove_orphans
    _remove_orphans()
    assert not os.path.exists(killed[0]["dir"])


def test_a_removed_node_loses_no_trial_and_a_new_node_is_used(cluster, tmp_path):
    node = cluster.worker
    runner = RayRunner(timeout_s=10.0)
    t, removed = _when_busy(runner, lambda d: cluster.remove_node(node), node=node.node_id)
    try:
        records = _tune(tmp_path / "a", runner)
        t.join()
        assert removed, "the worker node's device was never busy"
        assert runner.requeued >= 1
        _accounted_once(records, 8)
        cluster.worker = cluster.add_node(**NODE)  # a node joins: its device is used
        records = _tune(tmp_path / "b", runner, trials=4)
        _accounted_once(records, 4)
        assert runner.measured_on[cluster.worker.node_id] >= 1
    finally:
        runner.close()


def test_cli_tune_and_tune_model_on_the_cluster(cluster, tmp_path, capsys):
    from looptune.cli import main
    from looptune.tune.database import open_work_dir
    assert main(["tune", "matmul", "--shape", "M=16,N=16,K=16", "--trials", "4", "--per-iter",
                 "4", "--work-dir", str(tmp_path / "k"), "--cluster", cluster.address]) == 0
    err = capsys.readouterr().err
    assert "on the Ray cluster" in err
    assert f"measuring on {describe(machine_fingerprint())}" in err  # the workers' machine
    onnx = pytest.importorskip("onnx")
    from test_frontend_onnx import mlp_gemm
    onnx.save(mlp_gemm()[0], str(tmp_path / "mlp.onnx"))
    assert main(["tune-model", str(tmp_path / "mlp.onnx"), "--trials", "4", "--per-iter", "2",
                 "--work-dir", str(tmp_path / "m"), "--cluster", cluster.address,
                 "--quiet"]) == 0
    assert "on the Ray cluster" in capsys.readouterr().out
    here = machine_fingerprint()["id"]
    for work, trials in (("k", 4), ("m", 4)):
        db = open_work_dir(str(tmp_path / work))
        recs = db.get_all_tuning_records()
        assert sum(not r.baseline for r in recs) == trials
        assert all(r.measure["machine"]["id"] == here for r in recs)  # timed by a Ray worker
        db.close()


def test_a_cluster_that_cannot_be_reached_is_a_clear_error():
    """In a fresh process (not connected): an address nobody listens at, a host that does not
    resolve and a malformed address each fail at once, saying which, before Ray is imported;
    and looptune's modules import no Ray."""
    code = (
        "import sys\n"
        "from looptune.cli import main\n"
        "for a in ('127.0.0.1:9', 'no-such-host.invalid:6379', 'nonsense'):\n"
        "    assert main(['tune', 'matmul', '--cluster', a]) == 2\n"
        "import looptune.tune, looptune.report, looptune.cli.tune, looptune.cli.model\n"
        "assert 'ray' not in sys.modules\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr
    assert "nothing answers there" in out.stderr
    assert "cannot be resolved" in out.stderr
    assert "a cluster address is HOST:PORT" in out.stderr


def test_without_ray_the_error_says_how_to_install_it(monkeypatch):
    from looptune.tune.cluster import ray_module
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(TuneError, match=r"pip install 'looptune\[cluster\]'"):
        ray_module()


def test_a_cluster_without_a_device_is_a_clear_error_not_a_hang(cluster, monkeypatch):
    import looptune.tune.runner.ray as ray_runner
    monkeypatch.setattr(ray_runner, "DEVICE", "no_node_offers_this")
    func, inputs, _ = candidates()
    with RayRunner(wait_for_device_s=1.0) as runner:
        with pytest.raises(TuneError, match=r"no measurement device .*--resources"):
            measure(LocalBuilder(), runner, func, inputs[:1])
