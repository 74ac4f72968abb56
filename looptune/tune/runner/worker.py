"""The measurement worker: a child process that loads kernels, feeds them seeded random
inputs, checks them against a reference and times them, so that a kernel that crashes or
hangs takes down only this process.

Protocol over one socket (multiprocessing.connection messages):
  worker -> parent  ("ready", None)              once, after start-up
  parent -> worker  (RunnerInput, rtol, atol)    one candidate;  None: exit
  worker -> parent  ("reference", None)          computing a reference's outputs (once per
                                                 reference and inputs): it has a limit of its own
  worker -> parent  ("reference_done", seconds)  ... and finished it
  worker -> parent  ("first", seconds)           after the first (checked) call
  worker -> parent  ("done", {RunnerResult fields})
"""
from __future__ import annotations

import dataclasses
import os
import resource
import time
from collections import OrderedDict

import numpy as np


from ...error import RunError
from ...runtime.child import child_connection
from ...runtime.module import Module
from ...runtime.ndarray import compare, empty, pack_args, random_args as make_args
from ...runtime.timer import timer_lib
from ...schedule.primitives.layout import packed_shape

COLD_SLACK_S = 0.01  # the most a first call is taken to lose to cold start (page faults, threads)


class Worker:
    """State kept across candidates: the outputs of the last few references run."""

    def __init__(self, conn):
        self.conn = conn
        self.ref_outputs: OrderedDict = OrderedDict()  # ((artifact, symbol), seed, args) -> arrays
        self.inputs: OrderedDict = OrderedDict()  # (args, seed) -> (made arrays, work copies)

    def fresh_args(self, inp) -> list:
        """The random arguments of `inp` (make_args: inputs from its seed, outputs poisoned),
        made once per (arguments, seed) and copied for each candidate into arrays reused from
        one candidate to the next: at GPU sizes making them took longer than a trial (0.7 s
        for two 4096^2 inputs), and a kernel that writes its inputs spoils only its copy."""
        key = (tuple(inp.args_info), inp.seed)
        if key not in self.inputs:
            made = make_args(inp.args_info, inp.seed)
            self.inputs[key] = (made, [empty(a.shape, a.dtype) for a in made])
            while len(self.inputs) > 2:
                self.inputs.popitem(last=False)
        self.inputs.move_to_end(key)
        made, work = self.inputs[key]
        for src, dst in zip(made, work):
            np.copyto(dst, src)
        return work

    def reference_outputs(self, inp) -> list:
        artifact, symbol = inp.reference

        def run(arrays):
            ref = Module(artifact, symbol, inp.args_info, "", release_gil=True)
            ref.set_num_threads(self.threads(inp), source="EvaluatorConfig.num_threads")
            ref(*arrays)
        return self.cached_reference(inp, run, symbol)

    def cached_reference(self, inp, run, name: str) -> list:
        """The outputs of `run(arrays)` on the input's random arguments, kept for the last
        few (reference, seed, arguments)."""
        key = (inp.reference, inp.seed, tuple(inp.args_info))
        if key not in self.ref_outputs:
            arrays = [a.copy() for a in self.fresh_args(inp)]  # kept: not the work copies
            self.conn.send(("reference", None))
            t0 = time.perf_counter()
            try:
                run(arrays)
            except RunError as e:
                raise RunError(f"the reference {name} failed: {e}") from None
            self.conn.send(("reference_done", time.perf_counter() - t0))
            self.ref_outputs[key] = [x for x, a in zip(arrays, inp.args_info) if a.written]
            while len(self.ref_outputs) > 4:
                self.ref_outputs.popitem(last=False)
        self.ref_outputs.move_to_end(key)
        return self.ref_outputs[key]

    @staticmethod
    def threads(inp) -> int:
        n = inp.config.num_threads
        return n if n is not None else len(os.sched_getaffinity(0))

    def measure(self, inp, rtol: float, atol: float) -> dict:
        info = list(inp.args_info)
        for pos, factor in inp.packed:
            info[pos] = dataclasses.replace(info[pos], shape=packed_shape(info[pos].shape, factor))
        mod = Module(inp.artifact, inp.symbol, info, "", release_gil=True)
        mod.set_num_threads(self.threads(inp), source="EvaluatorConfig.num_threads")
        arrays = pack_args(self.fresh_args(inp), inp.packed)
        ref = self.reference_outputs(inp) if inp.reference is not None else None
        t0 = time.perf_counter()
        mod(*arrays)  # the first call: checked, and it sets the parent's timing deadline
        first = time.perf_counter() - t0
        self.conn.send(("first", first))
        if ref is not None:
            outs = [(a.name, x) for x, a in zip(arrays, inp.args_info) if a.written]
            for (name, out), expect in zip(outs, ref):
                problem = compare(name, out, expect, rtol, atol)
                if problem:
                    return {"error_class": "wrong_result", "error_msg": problem}
        limit = inp.abort_above_secs
        if limit is not None and first > limit:
            # the limit is a median of warm calls: compare a warm call with it (the first one
            # pays for page faults, thread start-up and cold caches; less than COLD_SLACK_S
            # beyond half the first call, so one more than twice the limit needs no second)
            warm = first if first > 2 * limit + COLD_SLACK_S else mod.time_evaluator(
                number=1, repeat=1, warm_up=False)(*arrays).results[0]
            if warm > limit:
                return {"run_secs": (warm,), "aborted_early": True}
        c = inp.config
        if c.calls_from == "python":
            # timed as a user calls it: with the GIL policy of an ordinary Module (held for
            # short kernels). The first call, above, let the GIL go, so that a kernel that
            # hangs there leaves child_connection's watch on the tuner running; a warm call
            # does not start hanging
            mod = Module(inp.artifact, inp.symbol, info, "")
            mod.set_num_threads(self.threads(inp), source="EvaluatorConfig.num_threads")
        prof = mod.time_evaluator(number=c.number, repeat=c.repeat, min_repeat_ms=c.min_repeat_ms,
                                  enable_cpu_cache_flush=c.enable_cpu_cache_flush,
                                  warm_up=False, arg_offsets=c.arg_offsets,
                                  stop_above=inp.screen_above_secs,
                                  calls_from=c.calls_from, placement=inp.placement)(*arrays)
        return {"run_secs": tuple(prof.results),
                "screened": len(prof.results) < c.repeat}

    def serve(self) -> None:
        while True:
            try:
                req = self.conn.recv()
            except (EOFError, OSError):
                return
            if req is None:
                return
            try:
                reply = self.measure(*req)
            except Exception as e:  # RunError, a library that will not load, ...
                reply = {"error_class": "run_error", "error_msg": f"{type(e).__name__}: {e}"}
            self.conn.send(("done", reply))


def main(fd: int, parent_pid: int) -> None:
    """Entry point of the worker process: serve requests on the socket `fd`."""
    conn = child_connection(fd, parent_pid)  # Ctrl-C is the tuner's; exits if the tuner dies
    # a candidate that crashes leaves no core file (one per crash, as large as this process)
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    timer_lib()  # compile (or load) the timing library before the first deadline starts
    conn.send(("ready", None))
    Worker(conn).serve()
