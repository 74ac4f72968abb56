"""How well a cost model ranks: Kendall's tau-b between predicted and measured order."""
from __future__ import annotations

import math

import numpy as np


def kendall_tau(predicted, measured_secs, *, block: int = 2048) -> float:
    """Rank correlation in [-1, 1] between scores (higher = predicted faster) and measured
    seconds (lower = faster; inf for failures, which tie as the slowest): 1 when the model
    orders every pair as measured, -1 when it reverses every pair. Ties are handled as in
    tau-b: (concordant - discordant) / sqrt(pairs untied in x * pairs untied in y). NaN when
    either side is constant. O(n^2) pair comparisons, `block` rows at a time."""
    x = np.asarray(predicted, dtype=np.float64).ravel()
    s = np.asarray(measured_secs, dtype=np.float64).ravel()
    if x.shape != s.shape:
        raise ValueError(f"kendall_tau: {x.size} predictions but {s.size} measurements")
    if np.isnan(x).any() or np.isnan(s).any():
        raise ValueError("kendall_tau: NaN in the input; use inf for failed measurements")
    y = -np.unique(s, return_inverse=True)[1].astype(np.float64)  # faster = larger
    n = x.size
    concord = untied_x = untied_y = 0.0
    for lo in range(0, n, block):
        sx = np.sign(x[lo:lo + block, None] - x[None, :])
        sy = np.sign(y[lo:lo + block, None] - y[None, :])
        concord += float((sx * sy).sum())
        untied_x += float(np.abs(sx).sum())
        untied_y += float(np.abs(sy).sum())
    if untied_x == 0 or untied_y == 0:
        return math.nan
    # every unordered pair was counted twice on each side, so the factors cancel
    return concord / math.sqrt(untied_x * untied_y)
