"""LocalBuilder: lower and render in the calling thread, and compile many sources at once,
each as soon as it is rendered (each C compile is its own process, so threads suffice), all
through the target's Backend; identical sources compile once.

Only a BuildError (the compiler refused or timed out, or lowering cannot handle the
schedule) becomes a failed result; any other exception is a bug in looptune and surfaces."""
from __future__ import annotations

import hashlib
import os
import time
from concurrent.futures import ThreadPoolExecutor

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
        # each distinct source compiles as soon as it is rendered (the next one renders
        # while the compiler runs): text -> future of the outcome
        pool = ThreadPoolExecutor(max_workers=min(self.max_workers, len(inputs) or 1),
                                  thread_name_prefix="looptune-build")
        compiles = process.Compiles()
        compile_one = compiles.guard(self._compile)
        rendered, futures = [], {}
        try:
            for inp in inputs:
                r = self._render_one(inp)
                rendered.append(r)
                if not isinstance(r, BuilderResult) and r[1].text not in futures:
                    futures[r[1].text] = pool.submit(compile_one, inp, r[1])
            self._generated.clear()  # what an overriding render replaced
            compiled = {src: f.result() for src, f in futures.items()}
        except BaseException as e:  # drop the queued compiles; on Ctrl-C, kill the running ones
            pool.shutdown(wait=False, cancel_futures=True)
            if isinstance(e, KeyboardInterrupt):
                compiles.stop()
            raise
        pool.shutdown()
        results = []
        for r in rendered:
            if isinstance(r, BuilderResult):
                results.append(r)
                continue
            symbol, source, digest, render_secs = r
            outcome = compiled[source.text]
            secs = render_secs + outcome["secs"]
            if "error_class" in outcome:
                results.append(BuilderResult(source_hash=digest, error_class=outcome["error_class"],
                                             error_msg=outcome["error_msg"], build_secs=secs))
            else:
                results.append(BuilderResult(artifact=outcome["path"], symbol=symbol,
                                             source_hash=digest, build_secs=secs))
        return results

    def _render_one(self, inp: BuilderInput):
        """(symbol, Source, sha256 of its text, seconds), or a failed BuilderResult."""
        t0 = time.perf_counter()
        try:
            symbol, text = self.render(inp)
        except BuildError as e:
            return BuilderResult(error_class="build_error", error_msg=f"rendering failed: {e}",
                                 build_secs=time.perf_counter() - t0)
        source = self._generated.pop(text, None) or Source(inp.func, text, symbol)
        digest = hashlib.sha256(text.encode()).hexdigest()
        return symbol, source, digest, time.perf_counter() - t0

    def _compile(self, inp: BuilderInput, source) -> dict:
        t0 = time.perf_counter()
        try:
            artifact = self.backend(inp.target).compile(source, timeout=self.timeout_s)
        except BuildError as e:
            return {"error_class": "build_timeout" if e.timed_out else "build_error",
                    "error_msg": str(e), "secs": time.perf_counter() - t0}
        return {"path": artifact.path, "secs": time.perf_counter() - t0}
