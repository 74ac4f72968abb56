"""Issue 26's closing check, against both real servers started here: two `looptune tune`
processes at once, each with `--database postgresql://...` and `--cluster HOST:PORT` on one
Ray head; a Ray device worker SIGKILLed mid-run; both exit 0, and `looptune db stats --json`
counts every trial of both runs. (The parts have their own CI tests: test_ray_cluster.py,
test_postgres_faults.py.)"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from looptune.target.machine import machine_fingerprint

pytestmark = [pytest.mark.cc, pytest.mark.slow]

ROOT = str(Path(__file__).resolve().parent.parent)


def device_actors_measuring() -> list:
    """Pids of Ray device actors measuring now (Ray names the process after the call)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and b"DeviceActor.measure" in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def test_two_tuners_share_one_farm_and_one_database_through_a_killed_worker(tmp_path):
    ray = pytest.importorskip("ray")
    pytest.importorskip("psycopg")
    from pg_server import PgServer, bin_dir, wait_until
    if bin_dir() is None:
        pytest.skip("no PostgreSQL programs (apt-get install postgresql)")
    from ray.cluster_utils import Cluster

    from looptune.tune.cluster import DEVICE
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    os.environ["PYTHONPATH"] = env["PYTHONPATH"]  # the Ray nodes' workers import looptune
    pg = PgServer()
    node = {"num_cpus": 1, "resources": {DEVICE: 1}, "object_store_memory": 200 * 2**20}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    cluster.add_node(**node)
    cluster.wait_for_nodes()
    try:
        url = pg.url(pg.create_database())
        tuners = [subprocess.Popen(
            [sys.executable, "-m", "looptune", "tune", "matmul", "--shape", shape, "--trials",
             "12", "--per-iter", "4", "--work-dir", str(tmp_path / f"w{i}"), "--database", url,
             "--cluster", cluster.address, "--quiet"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for i, shape in enumerate(("M=32,N=32,K=32", "M=48,N=32,K=16"))]
        assert wait_until(lambda: bool(device_actors_measuring()), timeout=180, step=0.02)
        os.kill(device_actors_measuring()[0], signal.SIGKILL)
        for p in tuners:
            out, _ = p.communicate(timeout=400)
            assert p.returncode == 0, out[-3000:]
        stats = subprocess.run([sys.executable, "-m", "looptune", "db", "stats", "--database",
                                url, "--json"], env=env, capture_output=True, text=True,
                               timeout=120)
        assert stats.returncode == 0, stats.stderr
        got = json.loads(stats.stdout)
        assert got["records"] == 24 and got["workloads"] == 2
        assert got["fingerprints"] == {machine_fingerprint()["id"]: 24}
    finally:
        ray.shutdown()
        cluster.shutdown()
        pg.close()
