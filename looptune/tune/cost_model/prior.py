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
    return dict(ix=ix, ops=ops,
                lines=[ix[f"buf{k}.lines"] for k in range(ACCESS_SLOTS)],
                local=[ix[f"buf{k}.local"] for k in range(ACCESS_SLOTS)])


def _decoded(rows: np.ndarray) -> np.ndarray:
    """The feature rows with their log2(1 + x) columns back to x."""
    f = rows.astype(np.float64)
    return np.where(LOG_COLUMNS, np.exp2(f) - 1.0, f)


def estimated_cycles(rows: np.ndarray, lanes: int) -> float:
    """The rough cycle count of one candidate from its (n_stores, FEATURE_WIDTH) rows."""
    if not len(rows):
        return 1.0
    c = _columns()
    ix = c["ix"]
    f = _decoded(rows)
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


# ------------------------------------------------------------------------------ GPUs
WARP = 32
LANES_PER_SM = 128        # float32 FMA lanes of one multiprocessor (Ampere, Hopper)
SHARED_BYTES_PER_SM = 128  # shared-memory bytes one multiprocessor serves per cycle
CACHE_BYTES_PER_SM = 32   # L1/L2 bytes per cycle per multiprocessor for global accesses
BUSY_THREADS_PER_SM = 512  # resident threads a multiprocessor needs to hide latency
SECTOR_ELEMS = 8          # 4-byte elements per 32-byte memory sector


@lru_cache(maxsize=None)
def _gpu_columns() -> dict:
    ix = {n: i for i, n in enumerate(feature_names())}
    slot = {name: [ix[f"buf{k}.{name}"] for k in range(ACCESS_SLOTS)]
            for name in ("shared", "local", "bytes", "thread_stride")}
    return dict(ix=ix, slot=slot,
                ops=[ix[n] for n in ("float_mad", "float_addsub", "float_mul", "float_div",
                                     "float_minmax", "float_math", "select")])


def gpu_estimated_cycles(rows: np.ndarray, sms: int) -> float:
    """A rough cycle count of one GPU candidate: per store, the largest of its arithmetic
    (float instructions; loads and address arithmetic overlap them), shared-memory and
    global-memory work, each spread over the lanes the launch keeps busy
    (blocks x threads, up to BUSY_THREADS_PER_SM per multiprocessor; a block that is not
    whole warps wastes the rest of its last warp), global accesses costing more the further
    apart a warp's lanes read (stride along threadIdx.x: 1 fills a 32-byte sector, 8 or more
    takes a sector per lane), and a register tile loading each operand once per step of its
    reduction. A store outside any thread loop runs on one lane."""
    if not len(rows):
        return 1.0
    c = _gpu_columns()
    ix = c["ix"]
    f = _decoded(rows)
    trip = f[:, ix["trip"]]
    threads = np.maximum(f[:, ix["gpu_threads"]], 1.0)
    blocks = np.maximum(f[:, ix["gpu_blocks"]], 1.0)
    warp_use = threads / (WARP * np.ceil(threads / WARP))
    busy = np.minimum(blocks * threads / (sms * BUSY_THREADS_PER_SM), 1.0) * warp_use
    busy = np.where(f[:, ix["gpu_threads"]] > 0, busy, 1.0 / (sms * LANES_PER_SM))
    compute = f[:, c["ops"]].sum(axis=1) / (sms * LANES_PER_SM * busy)
    # bytes read and written per buffer; a register tile (the loops inside the innermost
    # reduction loop) loads each operand once per step and reuses it from registers
    nbytes = f[:, c["slot"]["bytes"]].copy()
    micro = (f[:, ix["num_reduce_loops"]] > 0) & (f[:, ix["float_mad"]] > 0) \
        & (f[:, ix["rb_elems"]] > 1)
    steps = trip / np.maximum(f[:, ix["rb_elems"]], 1.0)
    reads = 1.0 - f[:, c["slot"]["local"]]
    per_elem = nbytes / np.maximum(trip, 1.0)[:, None]
    tiled = steps[:, None] * f[:, ix["rb_load_vectors"]][:, None] * per_elem \
        / np.maximum(reads.sum(axis=1), 1.0)[:, None]
    nbytes = np.where(micro[:, None] & (reads > 0), np.minimum(nbytes, tiled), nbytes)
    shared_bytes = (nbytes * f[:, c["slot"]["shared"]]).sum(axis=1)
    shared = shared_bytes / (sms * SHARED_BYTES_PER_SM * busy)
    is_global = (1.0 - f[:, c["slot"]["shared"]]) * (1.0 - f[:, c["slot"]["local"]])
    stride = f[:, c["slot"]["thread_stride"]]
    spread = np.where(stride > 0, np.minimum(stride, SECTOR_ELEMS), 1.0 / WARP)
    global_bytes = (nbytes * is_global * spread).sum(axis=1)
    memory = global_bytes / (sms * CACHE_BYTES_PER_SM * busy)
    work = np.maximum(np.maximum(compute, shared), memory)
    return float(max(work.sum(), 1.0))


def gpu_prior_scores(feats: list, sms: int) -> np.ndarray:
    """prior_scores for a GPU of `sms` multiprocessors."""
    return np.array([-np.log(gpu_estimated_cycles(f, sms)) for f in feats], dtype=np.float64)
