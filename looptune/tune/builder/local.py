"""LocalBuilder: render C in the calling thread, then run the C compiler on many sources at
once (each compile is its own process, so threads suffice); identical sources compile once.

Only a BuildError (the compiler refused or timed out, or lowering cannot handle the
schedule) becomes a failed result; any other exception is a bug in looptune and surfaces."""
from __future__ import annotations

import hashlib
import os
import time
from concurrent.futures import ThreadPoolExecutor

from ...codegen import CRenderer, finish_lowering, lower_loops
from ...runtime.compiler import compile_shared
from ...runtime.error import BuildError
from .base import Builder, BuilderInput, BuilderResult


@Builder.registry.register("local")
class LocalBuilder(Builder):
    """`max_workers` compiles run at a time (default: one per core); a compile that takes
    longer than `timeout_s` seconds is killed and reported as "build_timeout"."""

    def __init__(self, *, max_workers: int | None = None, timeout_s: float = 30.0):
        self.max_workers = max_workers or os.cpu_count() or 1
        self.timeout_s = timeout_s

    def render(self, inp: BuilderInput) -> tuple[str, str]:
        """(symbol, C source) of one input; override to change or inject code."""
        if inp.target.kind != "cpu":
            raise BuildError(f"building for {inp.target.kind} is not supported yet; use a cpu "
                             "target")
        func = inp.func
        loops = inp.lowered if inp.lowered is not None else lower_loops(func)
        source = CRenderer().render(finish_lowering(loops, vector_bits=inp.target.vector_bits),
                                    meta=inp.meta)
        return CRenderer.symbol(func), source

    def build(self, inputs: list) -> list:
        rendered = [self._render_one(inp) for inp in inputs]
        # one compile per distinct source: (source, name) -> future of (path, seconds)
        sources = {r[1]: inp.func.name for inp, r in zip(inputs, rendered)
                   if not isinstance(r, BuilderResult)}
        if not sources:
            return rendered
        pool = ThreadPoolExecutor(max_workers=min(self.max_workers, len(sources)),
                                  thread_name_prefix="looptune-build")
        try:
            futures = {src: pool.submit(self._compile, src, name) for src, name in sources.items()}
            compiled = {src: f.result() for src, f in futures.items()}
        except BaseException:  # Ctrl-C: drop the queued compiles, let running ones end
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
        results = []
        for r in rendered:
            if isinstance(r, BuilderResult):
                results.append(r)
                continue
            symbol, source, digest, render_secs = r
            outcome = compiled[source]
            secs = render_secs + outcome["secs"]
            if "error_class" in outcome:
                results.append(BuilderResult(source_hash=digest, error_class=outcome["error_class"],
                                             error_msg=outcome["error_msg"], build_secs=secs))
            else:
                results.append(BuilderResult(artifact=outcome["path"], symbol=symbol,
                                             source_hash=digest, build_secs=secs))
        return results

    def _render_one(self, inp: BuilderInput):
        """(symbol, source, sha256, seconds), or a failed BuilderResult."""
        t0 = time.perf_counter()
        try:
            symbol, source = self.render(inp)
        except BuildError as e:
            return BuilderResult(error_class="build_error", error_msg=f"rendering C failed: {e}",
                                 build_secs=time.perf_counter() - t0)
        digest = hashlib.sha256(source.encode()).hexdigest()
        return symbol, source, digest, time.perf_counter() - t0

    def _compile(self, source: str, name: str) -> dict:
        t0 = time.perf_counter()
        try:
            path = compile_shared(source, name=name, timeout=self.timeout_s)
        except BuildError as e:
            return {"error_class": "build_timeout" if e.timed_out else "build_error",
                    "error_msg": str(e), "secs": time.perf_counter() - t0}
        return {"path": str(path), "secs": time.perf_counter() - t0}
