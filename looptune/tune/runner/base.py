"""Runners measure built kernels: seeded random inputs, optional check against a reference,
honest timing, every failure classified."""
from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass

from ...runtime.ndarray import NUMPY_OFFSETS
from ..error import TuneError
from ..registry import Registry


@dataclass(frozen=True)
class EvaluatorConfig:
    """How a candidate is timed (stored with every record).

    Each of `repeat` measurements times `number` calls, with `number` raised until one
    measurement lasts `min_repeat_ms`; caches are flushed before each measurement if asked.
    `num_threads` fixes the thread count of parallel loops (None: the target's cores).
    `arg_offsets`: each measurement places the arguments at other byte offsets from a
    64-byte boundary, rotating through these, because that is how numpy's own arrays lie
    (see runtime/ndarray.py): the record is then the time a user gets with ordinary arrays,
    and the search favours kernels that do not depend on alignment. None: aligned arrays
    (how records made before this setting existed were measured). `calls_from`: "python"
    times the calls as a user makes them, `module(*arrays)` in a Python loop (for a kernel
    of a few microseconds, the call's cost and the interpreter's cache traffic between calls
    are part of what the user gets); "c" times a C loop calling the kernel directly (how
    records made before this setting existed were measured; runners without a Python call
    path, such as CUDA's, always time this way)."""

    number: int = 1
    repeat: int = 5
    min_repeat_ms: float = 20.0
    enable_cpu_cache_flush: bool = False
    num_threads: int | None = None
    arg_offsets: tuple | None = NUMPY_OFFSETS
    calls_from: str = "python"

    def __post_init__(self):
        for name in ("number", "repeat"):
            n = getattr(self, name)
            if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
                raise TuneError(f"EvaluatorConfig: {name} must be a whole number >= 1, got {n!r}")
        t = self.num_threads
        if t is not None and (isinstance(t, bool) or not isinstance(t, numbers.Integral) or t < 1):
            raise TuneError(f"EvaluatorConfig: num_threads must be a whole number >= 1 (or None: "
                            f"the target's cores), got {t!r}")
        if not isinstance(self.min_repeat_ms, numbers.Real) or not self.min_repeat_ms >= 0:
            raise TuneError(f"EvaluatorConfig: min_repeat_ms must be a number >= 0, got "
                            f"{self.min_repeat_ms!r}")
        if self.calls_from not in ("python", "c"):
            raise TuneError(f"EvaluatorConfig: calls_from must be 'python' or 'c', got "
                            f"{self.calls_from!r}")
        if self.arg_offsets is not None:  # a JSON list back to a tuple
            object.__setattr__(self, "arg_offsets", tuple(int(x) for x in self.arg_offsets))

    def to_json(self) -> dict:
        d = asdict(self)
        d["arg_offsets"] = None if self.arg_offsets is None else list(self.arg_offsets)
        return d

    @staticmethod
    def from_json(d: dict) -> "EvaluatorConfig":
        return EvaluatorConfig(**{"arg_offsets": None, "calls_from": "c", **d})


@dataclass(frozen=True)
class RunnerInput:
    """One built kernel to measure, with how (`config`), on which inputs (`seed`) and against
    what (`reference`)."""

    artifact: str                  # shared library to load
    symbol: str
    args_info: tuple               # ArgInfo per argument (shape, dtype, written)
    config: EvaluatorConfig
    seed: int = 0                  # random inputs are drawn from this seed
    reference: tuple | None = None # (artifact, symbol) of the unscheduled program to check against
    abort_above_secs: float | None = None  # stop after one call if slower than this
    screen_above_secs: float | None = None  # stop after one repeat if slower than this
    packed: tuple = ()             # ((argument, factor), ...) taken packed (pack_layout)
    placement: tuple | None = None  # byte offsets per argument for every repeat, instead of
                                    # config.arg_offsets' rotation (confirming a new best
                                    # where its first timing was slowest)
    workload_key: str | None = None  # what was built, for runners that keep results by
    sch_hash: str | None = None      # schedule (SimulatedRunner); timing ignores them


@dataclass(frozen=True)
class RunnerResult:
    """The times of one RunnerInput, or why there are none (`error_class`, `error_msg`)."""

    run_secs: tuple | None = None  # seconds per call, one per repeat
    error_class: str | None = None # "run_error", "run_timeout" or "wrong_result"
    error_msg: str | None = None
    aborted_early: bool = False    # timed once only: far slower than the best so far
    screened: bool = False         # one repeat only: clearly slower than the best so far
    measure: dict | None = None    # the record's whole `measure` dict, when the runner knows it
                                   # better than the tuner (a SimulatedRunner's stored record)
    machine: dict | None = None    # the fingerprint of the machine that timed it, when not this
                                   # one (target/machine.py; a remote runner's worker)

    @property
    def ok(self) -> bool:
        return self.error_class is None and self.run_secs is not None


class Runner:
    """The interface of a runner: `run` (and `recall`, `close`); register with
    `@Runner.registry.register("name")`. Failures are results (run_secs None and an error
    class), never exceptions."""

    registry = Registry("runner")
    # its times are measurements, with their noise: the tuner times a new best twice
    # (tune/measure.py); a runner that answers from a table sets this False
    confirms_best = True
    # it measures many candidates at once (on many devices: RayRunner): the task scheduler
    # hands it a whole batch in one `run` (tune/measure.py Measurements.run_many)
    parallel = False
    # the settings every result of this runner is measured with, when the runner fixes them
    # (a SimulatedRunner's table); None: the tuner's EvaluatorConfig
    evaluator: EvaluatorConfig | None = None

    @classmethod
    def create(cls, spec="local", **kwargs) -> "Runner":
        """A runner from its registered name ("local", "cuda", "simulated"), class or instance."""
        return cls.registry.create(spec, Runner, **kwargs)

    def run(self, inputs: list) -> list:
        """One RunnerResult per RunnerInput, in order, measured one at a time."""
        raise NotImplementedError

    def recall(self, workload_key: str, sch_hash: str, target) -> RunnerResult | None:
        """The result of a schedule known without building or running it (a simulated
        runner's table), or None: build it and `run` it. May raise (a table that lacks it)."""
        return None

    def close(self) -> None:
        """Stop worker processes."""
