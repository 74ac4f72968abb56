"""RayBuilder: LocalBuilder's rendering here, its compiles as Ray tasks on CPUs anywhere in
the cluster. A built library comes back as bytes through Ray's object store and is written
into this machine's kernel cache (atomically, with the description that loading checks), so
a BuilderResult's artifact is a local path as LocalBuilder's is; no shared file system."""
from __future__ import annotations

import time

from ...backend import Backend
from ...error import BuildError
from ...env import cache_dir
from ..cluster import bundle, connect, lost_worker_errors, unpack
from .base import Builder
from .local import LocalBuilder

MAX_IN_FLIGHT = 64  # compiles queued in the cluster at a time


def _compile_remote(target, source, timeout, options) -> dict:
    """A Ray task: compile `source` for `target` on the node it runs on; the library's files
    as bytes, or the BuildError as data (a failed build is a result, not an exception)."""
    try:
        artifact = Backend.for_target(target, **options).compile(source, timeout=timeout)
    except BuildError as e:
        return {"error_class": "build_timeout" if e.timed_out else "build_error",
                "error_msg": str(e)}
    return {"files": bundle(artifact.path, ("so", "o", "json"))}


@Builder.registry.register("ray")
class RayBuilder(LocalBuilder):
    """Compiles on a Ray cluster: `address` is a head's "HOST:PORT" or "local" (a Ray runtime
    started here; None: the one this process is connected to, else "local"). Each compile
    is a task needing `num_cpus` CPUs, retried elsewhere if its node dies (compiled here if
    that keeps failing); `timeout_s` as LocalBuilder's. Needs Ray
    (pip install 'looptune[cluster]')."""

    def __init__(self, *, address: str | None = None, max_workers: int | None = None,
                 timeout_s: float = 30.0, num_cpus: float = 1.0):
        super().__init__(max_workers=max_workers or MAX_IN_FLIGHT, timeout_s=timeout_s)
        self.address = address
        self.num_cpus = num_cpus
        self._task = None

    def build(self, inputs: list) -> list:
        ray = connect(self.address)
        if self._task is None:
            self._task = ray.remote(_compile_remote).options(num_cpus=self.num_cpus,
                                                             max_retries=3)
        return super().build(inputs)

    def _compile(self, inp, source) -> dict:
        """One compile on the cluster (called from LocalBuilder's threads, one per source)."""
        ray = connect(self.address)
        t0 = time.perf_counter()
        try:
            out = ray.get(self._task.remote(inp.target, source, self.timeout_s,
                                            self.backend_options))
        except lost_worker_errors():  # its node was lost more often than Ray retries it
            return super()._compile(inp, source)  # compiled here instead
        if "files" not in out:
            return {**out, "secs": time.perf_counter() - t0}
        path = unpack(out["files"], cache_dir() / "kernels")
        return {"path": str(path), "secs": time.perf_counter() - t0}
