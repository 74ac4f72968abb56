"""RayRunner: measure candidates on a Ray cluster, in one actor per measurement device.

A node offers each device through the custom resource `looptune_device` (tune/cluster.py)
and each actor needs one, so two timings never share a device. A kernel reaches its actor
as bytes through Ray's object store (no shared file system); the actor writes it into its
node's temp dir and times it with a LocalRunner, i.e. in a worker child process with the
local runner's timeouts, checks and honest timing: a kernel that crashes or hangs kills that
child and is a result (run_error, run_timeout), never retried. Only the loss of the actor
itself (its process or node gone) puts its candidate back in the queue for another device,
so nothing is lost or measured twice. Each actor has one candidate at a time, so a timeout
counts from when the candidate starts, not from when it was queued."""
from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, replace
from pathlib import Path

from ...target.machine import machine_fingerprint
from ..cluster import DEVICE, bundle, connect, lost_worker_errors, unpack
from ..error import TuneError
from .base import Runner, RunnerResult
from .local import LocalRunner

KEEP_LIBRARIES = 256  # kernels an actor keeps on its node's disk (the newest)
MAX_HELLO_FAILURES = 5  # device actors that die before they start, in a row: a broken node
DIR_PREFIX = "looptune-device-"  # + the actor's pid: an actor's kernels on its node's disk
CLEAN_UP_S = 5.0  # how long close() waits for the actors to remove their kernels' folders


class DeviceActor:
    """The actor on a device's node (made a Ray actor by RayRunner): places the kernels it
    is sent on its node's disk and measures them with a LocalRunner."""

    def __init__(self, timeout_s: float, check_rtol: float, check_atol: float):
        self.runner = LocalRunner(timeout_s=timeout_s, check_rtol=check_rtol,
                                  check_atol=check_atol)
        _remove_orphans()
        self.dir = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-"))
        atexit.register(shutil.rmtree, self.dir, True)
        self.placed: OrderedDict = OrderedDict()  # sha256 of a library -> its path here

    def hello(self) -> dict:
        """Who measures: this process, its node, the machine's fingerprint and the folder
        that holds the kernels it is sent."""
        import ray
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                "machine": machine_fingerprint(), "dir": str(self.dir)}

    def clean_up(self) -> None:
        """Remove the kernels' folder (ray.kill ends the process without its atexit)."""
        self.runner.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def measure(self, inp, files: dict, ref_files: dict | None) -> RunnerResult:
        ref = None if ref_files is None else (str(self._place(ref_files)), inp.reference[1])
        inp = replace(inp, artifact=str(self._place(files)), reference=ref)
        return replace(self.runner.run([inp])[0], machine=machine_fingerprint())

    def _place(self, files: dict) -> Path:
        key = hashlib.sha256(files["so"]).hexdigest()[:24]
        if key not in self.placed:
            self.placed[key] = unpack(files, self.dir / key)
            while len(self.placed) > KEEP_LIBRARIES:  # a loaded library outlives its file
                old, _ = self.placed.popitem(last=False)
                shutil.rmtree(self.dir / old, ignore_errors=True)
        self.placed.move_to_end(key)
        return self.placed[key]


def _remove_orphans() -> None:
    """Remove the kernels' folders of this node's actors that died without cleaning up
    (killed with their node, or by a fault): their folder names hold their pid."""
    for d in Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}*-*"):
        pid = d.name[len(DIR_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@dataclass(eq=False)
class _Device:
    handle: object       # the actor
    info: dict           # its hello(): pid, node, machine
    busy: bool = False


@Runner.registry.register("ray")
class RayRunner(Runner):
    """Measures a batch at once, one candidate per device of the cluster at `address` (a
    head's "HOST:PORT", or "local": a Ray runtime started here; None: the one this process
    is connected to, else "local"). `timeout_s` and the check's tolerances are LocalRunner's,
    counted on the device. A candidate whose device is lost is measured elsewhere, up to
    `max_losses` times (then run_error). Devices that join are used from the next batch;
    devices another tuner's runner holds are waited for (its actors keep them until it
    closes); a cluster that offers none for `wait_for_device_s` seconds is a TuneError.
    Needs Ray (pip install 'looptune[cluster]')."""

    parallel = True

    def __init__(self, *, address: str | None = None, timeout_s: float = 10.0,
                 check_rtol: float = 1e-3, check_atol: float = 1e-3, max_losses: int = 3,
                 wait_for_device_s: float = 300.0):
        self.address = address
        self.timeout_s = timeout_s
        self.check_rtol = check_rtol
        self.check_atol = check_atol
        self.max_losses = max_losses
        self.wait_for_device_s = wait_for_device_s
        self.requeued = 0     # candidates put back in the queue after a lost device
        self.measured_on: Counter = Counter()  # node id -> candidates measured there
        self._devices: list = []       # _Device, started
        self._starting: dict = {}      # hello() ref -> actor handle, not answered yet
        self._files: OrderedDict = OrderedDict()  # artifact path -> ObjectRef of its bytes
        self._actor_cls = None
        self._checked = 0.0            # when the cluster's devices were last counted
        self._hello_failures = 0
        self._cluster_devices = 0      # devices the cluster offers, when last counted

    def devices(self) -> list:
        """The started device actors: {"pid", "node", "machine", "dir", "busy"} each."""
        return [{**d.info, "busy": d.busy} for d in list(self._devices)]

    def run(self, inputs: list) -> list:
        ray = connect(self.address)
        results: list = [None] * len(inputs)
        queue = deque(range(len(inputs)))
        running: dict = {}  # result ref -> (input index, _Device)
        try:
            self._serve(ray, inputs, results, queue, running)
        except BaseException:  # Ctrl-C, a bug: what the busy devices do now is unknown
            for _, d in running.values():
                self._drop(d)
                ray.kill(d.handle)
            raise
        return results

    def _serve(self, ray, inputs, results, queue, running) -> None:
        """Hand queued inputs to free devices until every input has its result."""
        lost = lost_worker_errors()
        losses: Counter = Counter()
        seen_device = time.monotonic()
        while queue or running:
            self._top_up(ray)
            for d in [d for d in self._devices if not d.busy]:
                if not queue:
                    break
                i = queue.popleft()
                running[self._submit(ray, d, inputs[i])] = (i, d)
                d.busy = True
            if self._devices or self._cluster_devices:  # ours, or busy with another tuner's
                seen_device = time.monotonic()
            elif time.monotonic() - seen_device > self.wait_for_device_s:
                raise TuneError(f"no measurement device in the Ray cluster for "
                                f"{self.wait_for_device_s:g} s: start a node with `ray start "
                                f"--address HEAD:PORT --resources '{{\"{DEVICE}\": 1}}'`")
            waiting = list(running) + list(self._starting)
            if not waiting:
                time.sleep(0.5)
                continue
            done, _ = ray.wait(waiting, num_returns=1, timeout=1.0)
            for ref in done:
                if ref in self._starting:
                    self._started(ray, ref, lost)
                    continue
                i, d = running.pop(ref)
                try:
                    results[i] = ray.get(ref)
                    d.busy = False
                    self.measured_on[d.info["node"]] += 1
                except lost as e:
                    self._drop(d)
                    losses[i] += 1
                    self.requeued += 1
                    if losses[i] < self.max_losses:
                        queue.appendleft(i)  # measured by the next free device
                    else:
                        results[i] = RunnerResult(error_class="run_error", error_msg=(
                            f"the device measuring it was lost {losses[i]} times (last: "
                            f"{type(e).__name__}); its node may be failing"))

    def close(self) -> None:
        if self._devices or self._starting:
            ray = connect(self.address)
            handles = [d.handle for d in self._devices] + list(self._starting.values())
            try:  # each actor removes its kernels' folder (best effort: one may be lost)
                ray.wait([h.clean_up.remote() for h in handles], num_returns=len(handles),
                         timeout=CLEAN_UP_S)
            except Exception:  # noqa: BLE001 - a dead actor or node: nothing to clean there
                pass
            for handle in handles:
                ray.kill(handle)
        self._devices, self._starting = [], {}
        self._files.clear()

    def __enter__(self) -> "RayRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ devices
    def _top_up(self, ray) -> None:
        """Start an actor for each device of the cluster without one (at most once a second:
        nodes that join, devices freed by a lost actor)."""
        if time.monotonic() - self._checked < 1.0:
            return
        self._checked = time.monotonic()
        total = self._cluster_devices = int(ray.cluster_resources().get(DEVICE, 0))
        if self._actor_cls is None:
            self._actor_cls = ray.remote(DeviceActor).options(
                num_cpus=0, resources={DEVICE: 1}, max_restarts=0, max_task_retries=0)
        for _ in range(total - len(self._devices) - len(self._starting)):
            actor = self._actor_cls.remote(self.timeout_s, self.check_rtol, self.check_atol)
            self._starting[actor.hello.remote()] = actor

    def _started(self, ray, ref, lost) -> None:
        actor = self._starting.pop(ref)
        try:
            info = ray.get(ref)
        except lost as e:
            self._hello_failures += 1
            if self._hello_failures >= MAX_HELLO_FAILURES:
                raise TuneError(f"{self._hello_failures} measurement actors in a row died "
                                f"before they started ({e}); is looptune installed on every "
                                "node of the cluster?") from None
            return
        self._hello_failures = 0
        self._devices.append(_Device(actor, info))

    def _drop(self, d: _Device) -> None:
        if d in self._devices:
            self._devices.remove(d)
        self._checked = 0.0  # count the devices again now

    def _submit(self, ray, d: _Device, inp):
        ref_files = None if inp.reference is None else self._put(ray, inp.reference[0])
        return d.handle.measure.remote(inp, self._put(ray, inp.artifact), ref_files)

    def _put(self, ray, path: str):
        """The object-store ref of a library's bytes, put once per path (a reference is
        sent with every candidate)."""
        if path not in self._files:
            self._files[path] = ray.put(bundle(path))
            while len(self._files) > KEEP_LIBRARIES:
                self._files.popitem(last=False)
        self._files.move_to_end(path)
        return self._files[path]
