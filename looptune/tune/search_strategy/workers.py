"""The tuner's workers: design-space points replayed, postprocessed and featurized, and a
batch's C rendered, in child processes, so that the tuner's own Python work uses every core
the machine lends it, as the compiles already do.

Replaying a point, running the postprocessors (verification lowers the schedule) and
extracting its features take 10-20 ms of Python per candidate, and a batch looks at about
900 candidates to pick 64 (the tutorial conv2d: 11 s of search on a Zen 4 core, 18 s on a
Xeon's, while the compiles of the candidates already spread over every core). The search
draws every random choice itself (which space, which seed, which mutation) and hands the
workers only replays to do, so what it finds does not depend on how many workers there are.

A worker returns a `PendingCandidate`: the point's decisions, the structural hash of its
finished schedule and its feature rows, not the schedule. The search keeps such points, ranks
them by their features, mutates them by their decisions, and replays only the ones it picks
for measurement (`materialize`) in its own process.

LocalBuilder hands the workers a batch's scheduled functions to lower and render (`render`):
the C is the same text, made on every core at once instead of one after the other.

The workers are fresh interpreters (runtime/child.py: their process group dies with the
tuner), started on first use and shared by every task of the process; each keeps the state
of the last `MAX_TASKS` tasks it served (function, design spaces, postprocessors). How many:
`default_workers` (LOOPTUNE_WORKERS, else one per CPU, up to 8)."""
from __future__ import annotations

import atexit
import os
import pickle
import threading
import traceback
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

MAX_TASKS = 16
_BOOT = ("import sys; from looptune.tune.search_strategy.workers import main; "
         "main(int(sys.argv[1]), int(sys.argv[2]))")


@dataclass(eq=False)
class PendingCandidate:
    """A candidate a worker replayed: its hash and feature rows, without its schedule."""

    sch_hash: str
    features: np.ndarray | None  # rows of `extractor` on `target`; None: not extracted
    extractor: tuple | None      # (registered name, version) of the extractor used
    target: object = None


def lending_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Task:
    """What one search's workers need: picklable, sent once to each worker that serves it."""

    _next = 0

    def __init__(self, func, spaces: list, postprocs: list, target, extractor):
        Task._next += 1
        self.key = (os.getpid(), Task._next)
        self.setup = {"func": func, "traces": [s.trace for s in spaces],
                      "postprocs": list(postprocs), "target": target,
                      "extractor": _extractor_name(extractor)}
        try:
            pickle.dumps(self.setup)
        except Exception as e:  # noqa: BLE001 - pickle raises many kinds
            raise TaskUnusable(f"{type(e).__name__}: {e}") from None


def _extractor_name(extractor) -> tuple | None:
    """(registered name, version) if workers can create the same extractor, else None."""
    if extractor is None:
        return None
    from ..feature.base import FeatureExtractor
    name = getattr(type(extractor), "registered_name", None)
    try:
        same = name is not None and type(FeatureExtractor.create(name)) is type(extractor)
    except Exception:  # noqa: BLE001 - an extractor that needs arguments stays in-process
        same = False
    return (name, extractor.version) if same else None


class Workers:
    """`n` worker processes; `evaluate(task, jobs)` and `render(jobs)` spread the jobs over
    them and return one result per job, in order; callers on several threads take turns."""

    def __init__(self, n: int):
        from ...runtime.child import start_child
        self.children = []
        try:
            for _ in range(n):
                self.children.append(start_child(_BOOT))
        except OSError:
            self.close()
            raise
        self.served = [set() for _ in self.children]  # task keys each worker has set up
        self.broken = False
        self._turn = threading.Lock()

    @property
    def size(self) -> int:
        return len(self.children)

    def evaluate(self, task: Task, jobs: list, *, use: int | None = None) -> list:
        """jobs: (space index, seed, decisions or None); results: ("ok", decisions, info,
        PendingCandidate) or ("refused", why), in the jobs' order; on at most `use` workers."""
        return self._spread("jobs", task, jobs, use)

    def render(self, jobs: list, *, use: int | None = None) -> list:
        """jobs: (scheduled PrimFunc, Target, backend options, meta); results: ("ok", symbol,
        source text, seconds) or ("build_error", message, seconds), in the jobs' order."""
        return self._spread("render", None, jobs, use)

    def _spread(self, kind: str, task: Task | None, jobs: list, use: int | None) -> list:
        if not jobs:
            return []
        with self._turn:
            if self.broken or not self.children:
                raise WorkerLost("the workers were stopped")
            return self._spread_now(kind, task, jobs, use)

    def _spread_now(self, kind: str, task: Task | None, jobs: list, use: int | None) -> list:
        n = min(len(self.children), len(jobs), use or len(self.children))
        parts = [list(range(i, len(jobs), n)) for i in range(n)]
        key = task.key if task is not None else None
        try:
            for w, idx in enumerate(parts):
                conn = self.children[w][1]
                setup = None if task is None or key in self.served[w] else task.setup
                conn.send((kind, key, setup, [jobs[i] for i in idx]))
                if task is not None:
                    self.served[w].add(key)
            out, replies = [None] * len(jobs), []
            for w, idx in enumerate(parts):
                conn = self.children[w][1]
                reply, payload = conn.recv()
                if reply == "missing":  # it let this task's state go: set it up again
                    conn.send((kind, key, task.setup, [jobs[i] for i in idx]))
                    reply, payload = conn.recv()
                replies.append((reply, payload))
                for i, res in zip(idx, payload if reply == "done" else ()):
                    out[i] = res
            for reply, payload in replies:
                if reply == "unloadable":
                    raise TaskUnusable(payload)
                if reply == "error":
                    raise RuntimeError(f"a search worker failed:\n{payload}")
        except (EOFError, OSError) as e:
            self.broken = True
            raise WorkerLost(f"a search worker died ({e})") from None
        except TaskUnusable:
            raise
        except BaseException:
            self.broken = True  # a reply may still be on its way: do not reuse these workers
            raise
        return out

    def close(self) -> None:
        from ...runtime.child import stop_child
        for proc, conn in self.children:
            stop_child(proc, conn)
        self.children = []


class WorkerLost(Exception):
    """A search worker died; the search goes on in its own process."""


class TaskUnusable(Exception):
    """The workers cannot load a task (a postprocessor or function defined in a script's
    __main__ or a function's locals): that search goes on in its own process."""


_lock = threading.Lock()
_shared: Workers | None = None


def shared_workers(n: int) -> Workers | None:
    """The process's workers, at least `n` of them (started on first use, restarted if
    they broke or more are asked for), or None if they cannot start."""
    global _shared
    with _lock:
        if _shared is not None and (_shared.broken or _shared.size < n):
            _shared.close()
            _shared = None
        if _shared is None:
            try:
                _shared = Workers(n)
            except OSError:
                return None
        return _shared


def default_workers() -> int:
    """How many workers the tuner uses by default: LOOPTUNE_WORKERS, else one per CPU it
    may run on, up to 8."""
    from ... import env
    n = env.tuner_workers()
    return min(8, lending_cpus()) if n is None else n


@atexit.register
def close_shared() -> None:
    global _shared
    with _lock:
        if _shared is not None:
            _shared.close()
            _shared = None


# ------------------------------------------------------------------ the worker process
class _TaskState:
    def __init__(self, setup: dict):
        from ..feature.base import FeatureExtractor
        from .space import DesignSpace
        self.func = setup["func"]
        self.spaces = [DesignSpace(t) for t in setup["traces"]]
        self.postprocs = setup["postprocs"]
        self.target = setup["target"]
        name = setup["extractor"]
        self.extractor_key = name
        self.extractor = FeatureExtractor.create(name[0]) if name else None

    def run(self, job) -> tuple:
        from ...schedule import ScheduleError
        from .space import finish_point, replay
        space_i, seed, decisions = job
        try:
            point = replay(self.spaces[space_i], self.func, seed, decisions=decisions)
        except ScheduleError as e:
            return ("refused", f"replay refused: {str(e)[:160]}")
        finish_point(point, self.postprocs)
        if point.candidate is None:
            return ("refused", "a postprocessor refused the schedule")
        feats = None
        if self.extractor is not None:
            feats = self.extractor.extract([point.candidate], target=self.target)[0]
        return ("ok", point.decisions, point.info,
                PendingCandidate(point.candidate.sch_hash, feats, self.extractor_key,
                                 self.target))


def main(fd: int, parent_pid: int) -> None:
    """Entry point of a worker process: serve job lists on the socket `fd`."""
    from ...runtime.child import child_connection
    conn = child_connection(fd, parent_pid)  # Ctrl-C is the tuner's; exits if the tuner dies
    states: OrderedDict = OrderedDict()
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return
        try:
            msg = pickle.loads(data)
        except Exception:  # noqa: BLE001 - a class this process cannot import
            conn.send(("unloadable", traceback.format_exc(limit=1)))
            continue
        if msg is None:
            return
        kind, key, setup, jobs = msg
        if kind == "render":
            try:
                reply = ("done", [_render(*job) for job in jobs])
            except Exception:  # a bug: the builder raises it with this traceback
                reply = ("error", traceback.format_exc())
            conn.send(reply)
            continue
        if setup is None and key not in states:
            conn.send(("missing", None))
            continue
        try:
            if setup is not None:
                states[key] = _TaskState(setup)
                while len(states) > MAX_TASKS:
                    states.popitem(last=False)
        except Exception:  # noqa: BLE001 - unpickled, but a part will not set up here
            conn.send(("unloadable", traceback.format_exc(limit=1)))
            continue
        try:
            state = states[key]
            states.move_to_end(key)
            reply = ("done", [state.run(job) for job in jobs])
        except Exception:  # a bug: the search raises it with this traceback
            reply = ("error", traceback.format_exc())
        conn.send(reply)


def _render(func, target, backend_options: dict, meta) -> tuple:
    import time
    from ...backend import Backend
    from ...error import BuildError
    t0 = time.perf_counter()
    try:
        source = Backend.for_target(target, **backend_options).generate(func, meta=meta)
    except BuildError as e:
        return ("build_error", str(e), time.perf_counter() - t0)
    return ("ok", source.symbol, source.text, time.perf_counter() - t0)
