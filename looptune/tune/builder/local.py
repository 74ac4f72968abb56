"""LocalBuilder: lower and render (in the tuner's worker processes where there are several
CPUs, else in the calling thread), and compile many sources at once, each as soon as it is
rendered (each C compile is its own process, so threads suffice), all
through the target's Backend; identical sources compile once.

Only a BuildError (the compiler refused or timed out, or lowering cannot handle the
schedule) becomes a failed result; any other exception is a bug in looptune and surfaces."""
from __future__ import annotations

import hashlib
import os
import time
import threading
from concurrent.futures import Future
from contextlib import nullcontext

from ...backend import Backend, Source
from ...error import BuildError
from ...runtime import process
from .base import Builder, BuilderInput, BuilderResult


@Builder.registry.register("local")
class LocalBuilder(Builder):
    """`max_workers` compiles run at a time (default: one per core); a compile that takes
    longer than `timeout_s` seconds is killed and reported as "build_timeout"."""

    kind = "cpu"  # the target kind it builds for

    def __init__(self, *, max_workers: int | None = None, timeout_s: float = 30.0):
        self.max_workers = max_workers or os.cpu_count() or 1
        self.timeout_s = timeout_s
        self.backend_options: dict = {}  # what the Backend is created with
        self._generated: dict = {}  # source text -> its backend Source, between render and build

    def backend(self, target) -> Backend:
        if target.kind != self.kind:
            name = "local" if target.kind == "cpu" else target.kind
            raise BuildError(f"{type(self).__name__} builds for {self.kind} targets, not "
                             f"{target.kind}; use builder='{name}'")
        return Backend.for_target(target, **self.backend_options)

    def render(self, inp: BuilderInput) -> tuple[str, str]:
        """(symbol, source text) of one input, from its target's Backend; override to change
        or inject code."""
        source = self.backend(inp.target).generate(inp.func, loops=inp.lowered, meta=inp.meta)
        self._generated[source.text] = source
        return source.symbol, source.text

    def build(self, inputs: list) -> list:
        with self._stream(inputs) as stream:
            return list(stream)

    def build_stream(self, inputs: list, share=None) -> "BuildStream":
        """The results of `inputs`, in order, each as soon as it is built: render every input
        here (each compile starts as soon as its source is rendered) and return a BuildStream
        of them. With a CpuShare (cpu_share.py), `max_workers` compiles run on its other
        CPUs and up to one per measuring CPU whenever it lends them. A subclass that
        overrides `build` is streamed through it, once all are built."""
        if not self.streams:
            return BuildStream.of(self.build(inputs))
        return self._stream(inputs, share)

    @property
    def streams(self) -> bool:
        """Whether build_stream hands each result over as soon as it is built."""
        return type(self).build is LocalBuilder.build

    def _stream(self, inputs: list, share=None) -> "BuildStream":
        stream = BuildStream(self, share)
        try:
            for inp, rendered in zip(inputs, self._render_all(inputs)):
                stream.add(inp, rendered)
            self._generated.clear()  # what an overriding render replaced
            stream.all_added()
        except BaseException as e:
            stream.close(kill=isinstance(e, KeyboardInterrupt))
            raise
        return stream

    def _render_all(self, inputs: list) -> list:
        """_render_one of each input: spread over the tuner's worker processes
        (search_strategy/workers.py) where there are two or more CPUs and this builder renders
        C the standard way, else here, one after the other."""
        from ..search_strategy.workers import WorkerLost, default_workers, shared_workers
        n = default_workers()
        workers = None
        if (n >= 2 and len(inputs) >= 2 * n and type(self).render is LocalBuilder.render
                and all(inp.target.kind == "cpu" for inp in inputs)):
            workers = shared_workers(n)
        if workers is None:
            return [self._render_one(inp) for inp in inputs]
        try:
            results = workers.render([(inp.func, inp.target, self.backend_options, inp.meta)
                                      for inp in inputs], use=n)
        except WorkerLost:
            return [self._render_one(inp) for inp in inputs]
        return [_rendered(res[1], Source(inp.func, res[2], res[1]), res[3]) if res[0] == "ok"
                else _render_failed(res[1], res[2]) for inp, res in zip(inputs, results)]

    def _render_one(self, inp: BuilderInput):
        """(symbol, Source, sha256 of its text, seconds), or a failed BuilderResult."""
        t0 = time.perf_counter()
        try:
            symbol, text = self.render(inp)
        except BuildError as e:
            return _render_failed(e, time.perf_counter() - t0)
        source = self._generated.pop(text, None) or Source(inp.func, text, symbol)
        return _rendered(symbol, source, time.perf_counter() - t0)

    def _compile(self, inp: BuilderInput, source) -> dict:
        t0 = time.perf_counter()
        try:
            artifact = self.backend(inp.target).compile(source, timeout=self.timeout_s)
        except BuildError as e:
            return {"error_class": "build_timeout" if e.timed_out else "build_error",
                    "error_msg": str(e), "secs": time.perf_counter() - t0}
        return {"path": artifact.path, "secs": time.perf_counter() - t0}


def _rendered(symbol: str, source: Source, secs: float) -> tuple:
    return symbol, source, hashlib.sha256(source.text.encode()).hexdigest(), secs


def _render_failed(why, secs: float) -> BuilderResult:
    return BuilderResult(error_class="build_error", error_msg=f"rendering failed: {why}",
                         build_secs=secs)


class BuildStream:
    """A batch being built: `next(stream)` is the next input's BuilderResult, waiting for its
    compile. Compiles run on threads of their own (each pinned to CPUs when a CpuShare
    splits them: the compiler inherits its thread's CPUs). `close()` (always call it; with
    kill=True on Ctrl-C, which kills the running compilers; or use it as a context manager,
    which does that) lets no more compiles begin."""

    def __init__(self, builder: LocalBuilder | None, share=None):
        self.builder = builder
        self.share = share
        self.items: list = []    # BuilderResult, or (symbol, Source, digest, render secs, Future)
        self.jobs: list = []     # (input, Source, Future) of each distinct source, in order
        self._futures: dict = {}  # source text -> Future of its outcome
        self._next_job = 0
        self._cv = threading.Condition()  # guards jobs, _next_job, _all_added, _closed
        self._all_added = False
        self._threads: list = []
        self._pos = 0
        self._compiles = process.Compiles()
        self._closed = False

    @classmethod
    def of(cls, results: list) -> "BuildStream":
        """A stream of results already built."""
        stream = cls(None)
        stream.items = list(results)
        return stream

    def add(self, inp: BuilderInput, rendered) -> None:
        if isinstance(rendered, BuilderResult):
            self.items.append(rendered)
            return
        symbol, source, digest, secs = rendered
        fut = self._futures.get(source.text)
        if fut is None:
            fut = self._futures[source.text] = Future()
            with self._cv:
                self.jobs.append((inp, source, fut))
                self._cv.notify()
            if not self._threads:
                self._start()
        self.items.append((symbol, source, digest, secs, fut))

    def _start(self) -> None:
        """Start the compile threads: `max_workers` of them, first on the share's other
        CPUs, then (what is left) lent ones, one per measuring CPU at most."""
        share, n = self.share, self.builder.max_workers
        if share is None:
            plan = [(None, False)] * n
        else:
            plan = [(share.others, False)] * min(n, len(share.others))
            plan += [(share.measuring, True)] * min(n - len(plan), len(share.measuring))
        for cpus, lent in plan:
            t = threading.Thread(target=self._work, args=(cpus, lent), daemon=True,
                                 name="looptune-build")
            self._threads.append(t)
            t.start()

    def all_added(self) -> None:
        """Every input is in: a compile thread that finds no job left exits."""
        with self._cv:
            self._all_added = True
            self._cv.notify_all()

    def _wait_for_job(self) -> bool:
        """Wait until a job is left to take (True), or none will be (False)."""
        with self._cv:
            while not self._closed and self._next_job >= len(self.jobs) and not self._all_added:
                self._cv.wait()
            return not self._closed and self._next_job < len(self.jobs)

    def _take(self):
        with self._cv:
            if self._closed or self._next_job >= len(self.jobs):
                return None
            job = self.jobs[self._next_job]
            self._next_job += 1
            return job

    def _work(self, cpus, lent: bool) -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)  # this thread: the compilers it starts inherit it
        compile_one = self._compiles.guard(self.builder._compile)
        while self._wait_for_job():
            if lent and not self.share.lend():
                return
            try:
                job = self._take()
                if job is None:
                    continue
                inp, source, fut = job
                try:
                    fut.set_result(compile_one(inp, source))
                except BaseException as e:  # stopped (Ctrl-C), or a bug: the reader raises it
                    fut.set_exception(e)
            finally:
                if lent:
                    self.share.give_back()

    def __iter__(self):
        return self

    def __next__(self) -> BuilderResult:
        if self._pos >= len(self.items):
            raise StopIteration
        item = self.items[self._pos]
        self._pos += 1
        if isinstance(item, BuilderResult):
            return item
        symbol, source, digest, render_secs, fut = item
        waits = self.share is not None and not fut.done()
        with self.share.idle() if waits else nullcontext():  # the measuring CPUs compile
            outcome = fut.result()
        secs = render_secs + outcome["secs"]
        if "error_class" in outcome:
            return BuilderResult(source_hash=digest, error_class=outcome["error_class"],
                                 error_msg=outcome["error_msg"], build_secs=secs)
        return BuilderResult(artifact=outcome["path"], symbol=symbol, source_hash=digest,
                             build_secs=secs)

    def __enter__(self) -> "BuildStream":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(kill=exc_type is not None and issubclass(exc_type, KeyboardInterrupt))

    def close(self, *, kill: bool = False) -> None:
        """No more compiles begin; with `kill`, the running ones are killed (and the call
        waits until none runs), else they finish first."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        if self.share is not None:
            self.share.close()
        if kill:
            self._compiles.stop()
        for t in self._threads:
            t.join()
        for _, _, fut in self.jobs:  # never started: a reader gets an error, not a hang
            if not fut.done():
                fut.set_exception(BuildError("the build was stopped before this compile"))
