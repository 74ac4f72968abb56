"""An analytic prior: a rough cycle count of a candidate from its per-store feature rows, so
that a model ranks sensibly before it has learned anything and, with few measurements, only
has to learn a correction (XGBModel trains on top of it as xgboost's base margin).

Per store row, with `lanes` the target's float32 vector lanes:

- a reduction whose register block (the loops inside its innermost reduction loop) is
  unrolled and vectorized runs as a micro-kernel: each step issues `rb_vectors` FMAs and
  `rb_load_vectors` loads on two ports each, and no step is shorter than the FMA latency
  (FMA_LATENCY cycles: fewer than 2 * FMA_LATENCY accumulators leave the units idle); the
  accumulators are loaded and stored once per `rb_reduce_steps` steps;
- any other store costs (trip + operations) / (lanes per vector piece of its vectorized
  loop) instructions;
- both add LINE_CYCLES per cache line fetched from a non-local buffer and SPILL_CYCLES per
  register spilled per step.

The constants were set by hand on random and mutated candidates of matmul 1024 and a 3x3
conv2d; the result orders candidates, it does not predict a time.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..feature.per_store import ACCESS_SLOTS, LOG_COLUMNS, feature_names, vector_instructions

FMA_LATENCY = 4.0       # cycles
ISSUE_PORTS = 2.0       # FMAs, and loads, per cycle
LINE_CYCLES = 4.0       # per cache line a non-local buffer fetches
SPILL_CYCLES = 4.0      # per vector register spilled, per register-block step
LOOP_CYCLES = 0.5       # per iteration of a register block left as a loop


@lru_cache(maxsize=None)
def _columns() -> dict:
    """Column indices the estimate reads."""
    ix = {n: i for i, n in enumerate(feature_names())}
    ops = [ix[n] for n in ("loads", "float_mad", "float_addsub", "float_mul", "select",
                           "float_minmax", "float_div", "float_math")]
    return dict(log=LOG_COLUMNS, ix=ix, ops=ops,
                lines=[ix[f"buf{k}.lines"] for k in range(ACCESS_SLOTS)],
                local=[ix[f"buf{k}.local"] for k in range(ACCESS_SLOTS)])


def estimated_cycles(rows: np.ndarray, lanes: int) -> float:
    """The rough cycle count of one candidate from its (n_stores, FEATURE_WIDTH) rows."""
    if not len(rows):
        return 1.0
    c = _columns()
    ix = c["ix"]
    f = rows.astype(np.float64)
    f = np.where(c["log"], np.exp2(f) - 1.0, f)
    trip = f[:, ix["trip"]]
    eff = np.array([v / vector_instructions(int(v), lanes) if v > 1 else 1.0
                    for v in np.rint(f[:, ix["vec_len"]]).astype(int)])
    generic = (trip + f[:, c["ops"]].sum(axis=1)) / eff
    generic += LOOP_CYCLES * trip * (1.0 - f[:, ix["rb_unrolled"]]) / eff
    steps = trip / np.maximum(f[:, ix["rb_elems"]], 1.0)
    vectors, loads = f[:, ix["rb_vectors"]], f[:, ix["rb_load_vectors"]]
    kernel = steps * np.maximum(FMA_LATENCY, np.maximum(vectors, loads) / ISSUE_PORTS)
    kernel += steps / np.maximum(f[:, ix["rb_reduce_steps"]], 1.0) * vectors
    micro = (f[:, ix["num_reduce_loops"]] > 0) & (f[:, ix["rb_unrolled"]] > 0) \
        & (f[:, ix["float_mad"]] > 0)
    compute = np.where(micro, kernel, generic)
    lines = (f[:, c["lines"]] * (1.0 - f[:, c["local"]])).sum(axis=1)
    spill = f[:, ix["rb_spill"]] * steps
    total = compute + LINE_CYCLES * lines + SPILL_CYCLES * spill
    return float(max(total.sum(), 1.0))


def prior_scores(feats: list, lanes: int) -> np.ndarray:
    """-log(estimated cycles) per candidate: higher = predicted faster, on the scale of the
    log-throughput labels (up to a constant per workload)."""
    return np.array([-np.log(estimated_cycles(f, lanes)) for f in feats], dtype=np.float64)
