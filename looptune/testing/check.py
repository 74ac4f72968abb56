"""Checking one schedule differentially: replay its trace, lower it, run the reference
interpreter on the lowered IR and the compiled C kernel (in a sandbox process), and compare
both with numpy. A case is plain data (workload spec, trace, seeds), so a failure replays
from its JSON alone; an Outcome says what happened and in which stage."""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sys
import threading
import traceback
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..backend import Backend, args_info
from ..error import BuildError
from ..runtime.ndarray import INT_SENTINEL, compare
from ..schedule import ScheduleError, Trace
from ..tir import interpreter
from ..tir.structural import structural_equal
from .batch import merged_source
from .sandbox import KernelCall, Sandbox
from .schedgen import FuzzSchedule, random_actions
from .workloads import build, random_spec

CASE_FORMAT = 1
RTOL = ATOL = 1e-4  # atol is scaled by max(1, max|expected|) (see tune.runner.worker.compare)


@dataclass
class Case:
    """One schedule to check, as plain data: the workload spec, the trace (JSON), the seed of
    the schedule's sampling (decisions absent from the trace are drawn from it) and of the
    inputs. `origin` says where it came from."""

    spec: dict
    trace: dict
    schedule_seed: int
    input_seed: int
    origin: dict = field(default_factory=dict)


@dataclass
class Outcome:
    """What checking one case gave: ok, refused (a ScheduleError), a miscompile or a crash, and
    the stage it happened in."""

    kind: str         # ok | refused | miscompile | crash
    stage: str = ""   # workload, schedule, replay, lower, interpret, codegen, compile, run
    message: str = ""

    @property
    def failed(self) -> bool:
        return self.kind in ("miscompile", "crash")


@dataclass
class _Ready:
    """A case that passed the Python stages and waits for the C compiler."""

    case: Case
    source: str
    symbol: str
    args: list
    inputs: list
    expected: np.ndarray


class _Timeout(BaseException):  # not an Exception: code under test must not swallow it
    pass


@contextmanager
def _deadline(seconds: float):
    """Raise _Timeout in the main thread after `seconds` (no limit in other threads)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise _Timeout()
    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _crash(stage: str, e: BaseException) -> Outcome:
    if isinstance(e, _Timeout):
        return Outcome("crash", stage, "hang: the Python stages ran past their time limit")
    tb = traceback.extract_tb(e.__traceback__)
    where = f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
    return Outcome("crash", stage, f"{type(e).__name__}: {e}{where}")


def generate_case(seed: int, index: int, families=None, *,
                  timeout_s: float = 60.0) -> tuple[Case, FuzzSchedule | Outcome]:
    """Schedule #index of the run with `seed`: (its case, its schedule or a crash)."""
    rng = random.Random(f"looptune-fuzz:{seed}:{index}")
    spec = random_spec(rng, families)
    sched_seed, input_seed = rng.randrange(1 << 31), rng.randrange(1 << 31)
    origin = {"seed": seed, "index": index}
    try:
        func = build(spec).func
    except Exception as e:
        return Case(spec, Trace().to_json(), sched_seed, input_seed, origin), _crash("workload", e)
    sch = FuzzSchedule(func, seed=sched_seed)
    try:
        with _deadline(timeout_s):
            random_actions(sch, sched_seed)
    except (Exception, _Timeout) as e:
        trace = sch.trace.copy()
        if hasattr(e, "failed_instruction"):
            trace.append(*e.failed_instruction)
        return Case(spec, trace.to_json(), sched_seed, input_seed, origin), _crash("schedule", e)
    return Case(spec, sch.trace.to_json(), sched_seed, input_seed, origin), sch


def replay(case: Case) -> FuzzSchedule:
    """The case's schedule, replayed from its trace (ScheduleError if it is refused)."""
    sch = FuzzSchedule(build(case.spec).func, seed=case.schedule_seed)
    Trace.from_json(case.trace).apply_to_schedule(sch)
    return sch


class Fuzzer:
    """Checks cases. `source_hook(source) -> source`, if given, edits each kernel's C before
    it is compiled (tests use it to plant bugs). Kernels run in `sandbox` (default: one of
    its own, with a `timeout_s` limit per call)."""

    def __init__(self, *, timeout_s: float = 10.0, python_timeout_s: float = 60.0,
                 source_hook: Callable | None = None, sandbox: Sandbox | None = None):
        self.python_timeout_s = python_timeout_s
        self.source_hook = source_hook
        self.sandbox = sandbox or Sandbox(timeout_s=timeout_s)
        self.backend = Backend.for_target("cpu")
        self.applied: Counter = Counter()   # instruction kind -> times applied
        self.refused: Counter = Counter()   # instruction kind -> times refused
        self._libs = 0
        self._merge_warned = False

    def close(self) -> None:
        self.sandbox.close()

    # ------------------------------------------------------------------ checking
    def check(self, case: Case) -> Outcome:
        """Replay one case and check it (the shrinker's and the regression tests' entry)."""
        try:
            with _deadline(self.python_timeout_s):
                sch = replay(case)
        except ScheduleError as e:
            return Outcome("refused", "replay", str(e))
        except (Exception, _Timeout) as e:
            return _crash("schedule", e)
        got = self._python_stages(case, sch, 0)
        return got if isinstance(got, Outcome) else self._compiled([got])[0]

    def check_generated(self, items: list) -> list[Outcome]:
        """Outcomes of freshly generated (case, schedule or crash) pairs; the compiled
        stages of the candidates that get that far share one library."""
        outcomes: list = [None] * len(items)
        ready, where = [], []
        for k, (case, sch) in enumerate(items):
            if isinstance(sch, Outcome):
                outcomes[k] = sch
                continue
            for inst in sch.trace.insts:
                self.applied[inst.kind.name] += 1
            self.refused.update(sch.refused)
            got = self._check_replay(case, sch)
            if got is None:
                got = self._python_stages(case, sch, len(ready))
            if isinstance(got, Outcome):
                outcomes[k] = got
            else:
                ready.append(got)
                where.append(k)
        for k, out in zip(where, self._compiled(ready)):
            outcomes[k] = out
        return outcomes

    def _check_replay(self, case: Case, sch) -> Outcome | None:
        """Traces replay: the JSON trace, replayed, gives the same function."""
        try:
            with _deadline(self.python_timeout_s):
                again = replay(Case(**{**asdict(case), "trace": json.loads(
                    json.dumps(case.trace))}))
        except (Exception, _Timeout) as e:
            return _crash("replay", e)
        if not structural_equal(again.func, sch.func):
            return Outcome("crash", "replay", "the trace, replayed, gives another function")
        return None

    def _python_stages(self, case: Case, sch, slot: int):
        """Lower, interpret and render: an Outcome if something fails, else a _Ready."""
        stage = "workload"
        try:
            with _deadline(self.python_timeout_s):
                wl = build(case.spec)
                inputs = wl.inputs(case.input_seed)
                expected = wl.expected(inputs)
                stage = "lower"
                func = sch.func
                func = type(func)(f"c{slot}_{func.name}", func.params, func.body, func.attrs)
                loops = self.backend.lower_loops(func)
                scalar = self.backend.lower(func, loops=loops, vectorize=False)
                stage = "interpret"
                if _iterations(scalar.body) <= MAX_INTERPRETED:  # else the C run checks it
                    got = _interpret(scalar, inputs, expected)
                    problem = compare(wl.output.name, got, expected, RTOL, ATOL)
                    if problem:
                        return Outcome("miscompile", _blame(sch.func, inputs, expected),
                                       problem)
                stage = "lower"
                vec = self.backend.lower(func, loops=loops)
                stage = "codegen"
                rendered = self.backend.render(
                    func, vec, meta={"trace": f"{len(sch.trace)} instructions"})
                source = rendered.text
                if self.source_hook is not None:
                    source = self.source_hook(source)
        except (Exception, _Timeout) as e:
            return _crash(stage, e)
        return _Ready(case, source, rendered.symbol, list(args_info(func)), inputs, expected)

    def _compiled(self, ready: list) -> list[Outcome]:
        if not ready:
            return []
        lib = self._build(ready)
        if isinstance(lib, BuildError):  # compile them one by one (and find the culprits)
            outs = [out for r in ready for out in self._compiled_alone(r)]
            if not any(o.stage == "compile" for o in outs) and not self._merge_warned:
                self._merge_warned = True
                print("fuzz: note: a batch of kernels that compile one by one did not compile "
                      f"as one unit (batch.py misses a name?):\n{str(lib)[-1500:]}",
                      file=sys.stderr)
            return outs
        try:
            runs = self.sandbox.run(lib, [KernelCall(r.symbol, tuple(r.args), tuple(r.inputs))
                                          for r in ready])
        finally:
            shutil.rmtree(lib.parent, ignore_errors=True)
        return [_judge(r, run) for r, run in zip(ready, runs)]

    def _compiled_alone(self, r: _Ready) -> list[Outcome]:
        lib = self._build([r])
        if isinstance(lib, BuildError):
            return [Outcome("crash", "compile", str(lib)[-2000:])]
        try:
            return [_judge(r, self.sandbox.run(lib, [KernelCall(r.symbol, tuple(r.args),
                                                                tuple(r.inputs))])[0])]
        finally:
            shutil.rmtree(lib.parent, ignore_errors=True)

    def _build(self, ready: list):
        """One shared library with every kernel of `ready` (or the BuildError): one
        translation unit for a batch (batch.py), a kernel alone as the build compiles it."""
        self._libs += 1
        if len(ready) > 1:
            units = [("batch.c", merged_source([(r.symbol, r.source) for r in ready]), [])]
        else:
            units = [(f"{r.symbol}.c", r.source, []) for r in ready]
        try:
            return self.backend.link(units, name=f"fuzz{os.getpid()}_{self._libs}", jobs=1,
                                     timeout=300)
        except BuildError as e:
            left = Path(e.source_path or "").parent  # the sources compile_library leaves
            if left.parent.name == "libraries":
                shutil.rmtree(left, ignore_errors=True)
            return e


# loop iterations past which the interpreter is skipped: splits of small loops into large
# guarded tiles (an extent of 8 split as [1, 9, 5]) multiply into millions of iterations that
# the pure-Python interpreter takes minutes for (schedule #4920 of seed 11: 100 s)
MAX_INTERPRETED = 500_000


def _iterations(stmt) -> int:
    """Loop iterations of a scalar program: each loop's extent times its body's, summed."""
    from ..tir.functor import stmt_children
    from ..tir.stmt import For
    if isinstance(stmt, For):
        return stmt.extent * max(1, _iterations(stmt.body))
    return sum(_iterations(c) for c in stmt_children(stmt))


def _interpret(func, inputs, like: np.ndarray) -> np.ndarray:
    """The output of `func` (lowered or not) on copies of `inputs`, shaped like `like`."""
    out = np.empty_like(like)
    out[...] = np.nan if out.dtype.kind == "f" else np.array(INT_SENTINEL).astype(out.dtype)
    interpreter.run(func, *[x.copy() for x in inputs], out)
    return out


def _blame(func, inputs, expected) -> str:
    """Which stage a wrong interpreted answer comes from: the scheduled IR itself, or
    lowering."""
    try:
        wrong = compare("out", _interpret(func, inputs, expected), expected, RTOL, ATOL) is not None
    except Exception:
        wrong = True
    return "schedule" if wrong else "lower"


def _judge(r: _Ready, run) -> Outcome:
    kind, payload = run
    if kind == "crash":
        return Outcome("crash", "run", payload)
    if kind == "wrong":
        return Outcome("miscompile", "run", payload)
    if kind == "error":
        return Outcome("crash", "run", payload)
    problem = compare(r.args[-1].name, payload[0], r.expected, RTOL, ATOL)
    if problem:
        return Outcome("miscompile", "run", "the compiled kernel (the interpreter agrees with "
                       f"numpy): {problem}")
    return Outcome("ok")


def case_to_json(case: Case, outcome: Outcome | None = None) -> dict:
    d = {"format": CASE_FORMAT, **asdict(case)}
    if outcome is not None:
        d.update(kind=outcome.kind, stage=outcome.stage, message=outcome.message)
    d["python"] = Trace.from_json(case.trace).as_python().splitlines()
    return d


def case_from_json(d: dict) -> Case:
    if d.get("format") != CASE_FORMAT:
        raise ValueError(f"not a fuzz case of format {CASE_FORMAT}")
    return Case(d["spec"], d["trace"], d["schedule_seed"], d["input_seed"], d.get("origin", {}))
