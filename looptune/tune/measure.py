"""Measuring built candidates, the same way for every search the task scheduler drives
(template tuners included): the unscheduled program is built once as the reference, an
identical binary is measured once, a candidate far slower than the best so far is timed
once (early abort), one clearly slower gets one repeat instead of all (screened), a new best
is timed twice (confirmed), and every result carries the settings it was measured with."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace

from ..runtime.compiler import compiler_version
from ..runtime.ndarray import rotated_offsets
from ..error import BuildError
from ..schedule.primitives.layout import PACKED
from ..target.machine import machine_fingerprint
from .builder.base import BuilderInput, BuilderResult
from .runner.base import EvaluatorConfig, RunnerInput, RunnerResult


def build_reference(builder, func, target, name: str) -> tuple:
    """(artifact, symbol) of the unscheduled `func`, to check candidates against. For a GPU
    target it is built for this host's CPU, its outermost loops run on every core (the CUDA
    runner's worker runs it to get the expected outputs, within the candidate's time limit:
    a 4096^3 matmul takes some 15 s on one core)."""
    if target.kind == "cuda":
        from ..target import Target
        from .builder.local import LocalBuilder
        builder, target = LocalBuilder(max_workers=1), Target.create("cpu")
        func = outer_loops_parallel(func)
    ref = builder.build([BuilderInput(func, target, {"trace": "unscheduled"})])[0]
    if not ref.ok:
        raise BuildError(f"the unscheduled {name} does not build: {ref.error_msg}")
    return ref.artifact, ref.symbol


def outer_loops_parallel(func):
    """`func` computing the same sums in the same order per output element, faster: in each
    block whose innermost loop is a reduction and that has two spatial loops or more, the
    innermost spatial loop moves inside the reductions (a contiguous, vectorizable inner
    loop), and the outermost loop of more than one iteration runs on every core where it may
    (a spatial loop). Only the C compiler's FMA contraction may round differently."""
    from ..schedule import Schedule
    from ..schedule.error import ScheduleError
    from .schedule_rule.analysis import loop_kinds
    sch = Schedule(func)
    for name in sch.block_names():
        block = sch.get_block(name)
        loops = sch.get_loops(block)
        kinds = loop_kinds(sch, block)
        spatial = [lp for lp, k in zip(loops, kinds) if k == "S"]
        reduction = [lp for lp, k in zip(loops, kinds) if k == "R"]
        if kinds and kinds[-1] == "R" and len(spatial) >= 2 and "O" not in kinds:
            try:
                sch.reorder(*spatial[:-1], *reduction, spatial[-1])
            except ScheduleError:
                pass  # as it was
        outer = next((lp for lp in sch.get_loops(block) if sch.get(lp).extent != 1), None)
        if outer is not None:
            try:
                sch.parallel(outer)
            except ScheduleError:
                pass  # a reduction loop: this block stays serial
    return sch.func


@dataclass(eq=False)
class Measurements:
    """One task's measuring state in one run."""

    runner: object
    evaluator: EvaluatorConfig
    args_info: tuple
    seed: int | None
    workload_key: str
    abort_ratio: float = 3.0
    screen_ratio: float = 1.5
    confirm_best: bool = True  # a new best is timed twice (below)
    measured: dict = field(default_factory=dict)  # source hash -> RunnerResult

    def run(self, built: BuilderResult, sch, sch_hash: str, *, best_secs: float,
            reference) -> RunnerResult:
        """The result of one built candidate: its build failure, the result of an identical
        binary measured before, or a measurement (timed once if over abort_ratio x best)."""
        if not built.ok:
            return RunnerResult(None, built.error_class, built.error_msg)
        if built.source_hash in self.measured:  # an identical binary: measured once
            return self.measured[built.source_hash]
        inp = self._input(built, sch, sch_hash, best_secs, reference)
        res = self.runner.run([inp])[0]
        if self._beats(res, best_secs):
            res = self._confirmed(res, inp)
        self.measured[built.source_hash] = res
        return res

    def run_many(self, items, *, best_secs: float, reference) -> list:
        """The results of many built candidates ((built, sch, sch_hash) each), measured in one
        call of a runner that spreads them over its devices (`Runner.parallel`). As `run` for
        each, except that early abort and screening compare with the best before the batch,
        and only the batch's fastest new best is timed twice."""
        out: list = [None] * len(items)
        todo: dict = {}  # source hash -> ([item indices], RunnerInput)
        for i, (built, sch, sch_hash) in enumerate(items):
            if not built.ok:
                out[i] = RunnerResult(None, built.error_class, built.error_msg)
            elif built.source_hash in self.measured:
                out[i] = self.measured[built.source_hash]
            elif built.source_hash in todo:  # identical binaries in one batch: measured once
                todo[built.source_hash][0].append(i)
            else:
                todo[built.source_hash] = ([i], self._input(built, sch, sch_hash, best_secs,
                                                            reference))
        got = dict(zip(todo, self.runner.run([inp for _, inp in todo.values()]) if todo else ()))
        better = [h for h, r in got.items() if self._beats(r, best_secs)]
        if better:
            h = min(better, key=lambda h: statistics.median(got[h].run_secs))
            got[h] = self._confirmed(got[h], todo[h][1])
        for h, res in got.items():
            self.measured[h] = res
            for i in todo[h][0]:
                out[i] = res
        return out

    def _input(self, built: BuilderResult, sch, sch_hash: str, best_secs: float,
               reference) -> RunnerInput:
        known = math.isfinite(best_secs)
        return RunnerInput(
            built.artifact, built.symbol, self.args_info, self.evaluator, seed=self.seed,
            reference=reference, abort_above_secs=best_secs * self.abort_ratio if known else None,
            screen_above_secs=best_secs * self.screen_ratio if known else None,
            packed=sch.func.attr(PACKED, ()),
            workload_key=self.workload_key, sch_hash=sch_hash)

    def _beats(self, res: RunnerResult, best_secs: float) -> bool:
        """Whether `res` is a new best to time a second time."""
        return (self.confirm_best and getattr(self.runner, "confirms_best", True) and res.ok
                and res.measure is None and not res.aborted_early
                and not res.screened and statistics.median(res.run_secs) < best_secs)

    def _confirmed(self, res: RunnerResult, inp: RunnerInput) -> RunnerResult:
        # The fastest of many noisy measurements is likely a lucky one: a new best is
        # timed a second time and its record holds both (the median of all repeats),
        # so the best record's time is one a user's calls reproduce. The second timing
        # places the arguments where the first one's slowest repeat had them: a kernel
        # slow at one placement (as AVX2, a matmul 1024 ran 28.6 ms with A 64-byte aligned
        # and 23.9 ms elsewhere; its median over the rotation said 23.9) gets a record that
        # holds there too, and the search moves on to kernels that run well wherever
        # numpy's arrays start.
        again = self.runner.run([replace(inp, abort_above_secs=None, screen_above_secs=None,
                                         placement=slowest_placement(res, inp))])[0]
        if again.ok:
            res = replace(res, run_secs=tuple(res.run_secs) + tuple(again.run_secs))
        return res

    def settings(self, res: RunnerResult, source_hash) -> dict:
        """A record's `measure`: the stored record's if the runner recalled one, else the
        evaluator settings, compiler, early abort, the binary's hash and the fingerprint of
        the machine that timed it."""
        if res.measure is not None:
            return dict(res.measure)
        out = {**self.evaluator.to_json(), "compiler": compiler_version_safe(),
               "aborted_early": res.aborted_early, "source_hash": source_hash,
               "machine": res.machine or machine_fingerprint()}
        if res.screened:
            out["screened"] = True
        return out


def slowest_placement(res: RunnerResult, inp: RunnerInput) -> tuple | None:
    """The argument offsets of the slowest repeat of `res` (repeat r ran at rotation r of
    the evaluator's arg_offsets), or None where the repeats were not placed (aligned
    arrays, or a runner that recalled or simulated the time)."""
    offsets = inp.config.arg_offsets
    if not offsets or not res.run_secs or len(res.run_secs) < 2 or res.measure is not None:
        return None
    r = max(range(len(res.run_secs)), key=lambda i: res.run_secs[i])
    return rotated_offsets(offsets, len(inp.args_info), r)


def compiler_version_safe() -> str:
    try:
        from .. import env
        return compiler_version(env.cc())
    except Exception:  # noqa: BLE001 - provenance only; never fails a measurement
        return "unknown"
