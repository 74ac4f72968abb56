"""A Ray cluster as a measurement farm: connecting to it (or starting a local one), and
compiled kernels as bytes that travel through Ray's object store, so that no node needs a
file system shared with another. Ray is imported only here, and only when asked for."""
from __future__ import annotations

import socket
import sys
from pathlib import Path

from ..runtime.files import atomic_write, locked, sha256_file
from .error import TuneError

# the custom resource through which a node offers one measurement device: a device actor
# needs one, so two timings never share a device (`ray start --resources '{"looptune_device": 1}'`)
DEVICE = "looptune_device"
INSTALL = "pip install 'looptune[cluster]'"
PROBE_TIMEOUT_S = 5.0  # to reach a head's port before handing it to Ray (which waits minutes)


def ray_module():
    """The `ray` package, or a TuneError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise TuneError(f"tuning on a Ray cluster needs Ray, which is not installed: {INSTALL}") \
            from None
    return ray


def connect(address: str | None = None):
    """`ray`, connected: to the cluster whose head is at `address` ("HOST:PORT"), or to a
    local runtime started here (`address` "local" or None) whose one node offers this
    machine's device. Already connected: as it is (to a cluster on the same port, if
    `address` names one)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        if address not in (None, "local"):
            _, port = parse_address(address)
            here = ray.get_runtime_context().gcs_address
            if not str(here).endswith(f":{port}"):
                raise TuneError(f"this process is connected to the Ray cluster at {here}, "
                                f"not {address}; one process measures on one cluster")
        return ray
    if address in (None, "local"):
        ray = ray_module()
        ray.init(resources={DEVICE: 1}, include_dashboard=False, log_to_driver=False)
        return ray
    host, port = parse_address(address)  # a wrong address fails at once, Ray or not
    probe(host, port)
    ray = ray_module()
    try:
        ray.init(address=f"{host}:{port}", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise TuneError(f"cannot join the Ray cluster at {address}: {e}; is it a Ray head "
                        f"(`ray start --head --port {port}`) of the same Ray version?") from None
    return ray


def parse_address(address: str) -> tuple:
    """(host, port) of "HOST:PORT"; TuneError naming the expected form otherwise."""
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise TuneError(f"a cluster address is HOST:PORT (a Ray head, e.g. 10.0.0.5:6379) or "
                        f"'local' (a Ray runtime started here), got {address!r}")
    return host.strip("[]"), int(port)


def probe(host: str, port: int) -> None:
    """TuneError saying which it is when `host` does not resolve or nothing listens at its
    `port` (Ray itself would retry for minutes)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise TuneError(f"the cluster address {host}:{port}: the host {host!r} cannot be "
                        f"resolved ({e.strerror}); check the name of the Ray head") from None
    family, kind, proto, _, addr = infos[0]
    try:
        with socket.socket(family, kind, proto) as s:
            s.settimeout(PROBE_TIMEOUT_S)
            s.connect(addr)
    except OSError as e:
        raise TuneError(f"the cluster address {host}:{port}: nothing answers there "
                        f"({e.strerror or e}); start the Ray head with `ray start --head "
                        f"--port {port}`, or check the host, the port and the firewall") from None


def lost_worker_errors() -> tuple:
    """The exceptions by which Ray says a worker process or node was lost (not that the
    code it ran failed): what was running there is put back in the queue."""
    ex = ray_module().exceptions
    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError",
             "NodeDiedError", "ObjectLostError", "OwnerDiedError", "LocalRayletDiedError")
    return tuple(getattr(ex, n) for n in names if hasattr(ex, n))


# ---------------------------------------------------------------------- artifacts as bytes
def bundle(so_path, parts=("so", "json")) -> dict:
    """The files of a compiled library (runtime.compiler.compile_shared: the library "so",
    its object "o", the description "json" that loading checks) as bytes: {"stem", parts}."""
    so_path = Path(so_path)
    out = {"stem": so_path.stem}
    for part in parts:
        path = so_path.with_suffix(f".{part}")
        if path.exists():
            out[part] = path.read_bytes()
    return out


def unpack(files: dict, directory) -> Path:
    """Write a bundle's files into `directory` (each atomically, the description last: it
    says the others are whole; under the entry's lock, as compile_shared writes the kernel
    cache) unless they are there already; the library's path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    so_path = directory / f"{files['stem']}.so"
    with locked(so_path.with_suffix(".lock")):  # the kernel cache's lock of this entry
        if so_path.with_suffix(".json").exists() and _same(so_path, files):
            return so_path
        for part in sorted((p for p in files if p not in ("stem", "json")), key="so".__eq__):
            atomic_write(so_path.with_suffix(f".{part}"), files[part])
        if "json" in files:
            atomic_write(so_path.with_suffix(".json"), files["json"])
    return so_path


def _same(so_path: Path, files: dict) -> bool:
    import hashlib
    try:
        return all(sha256_file(so_path.with_suffix(f".{p}")) == hashlib.sha256(data).hexdigest()
                   for p, data in files.items() if p != "stem")
    except OSError:
        return False
