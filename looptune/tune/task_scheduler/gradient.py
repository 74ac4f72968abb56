"""GradientBased: Ansor's task scheduler. The objective is the weighted sum of every task's
best time; the next batch goes to the task expected to lower it most per trial:

    gain_i = w_i * (alpha * backward_i + (1 - alpha) * forward_i)
    backward_i = (best_i[r - window] - best_i[r]) / trials in those rounds  (recent progress)
    forward_i  = best_i / trials_i  (optimism: as much again as all trials so far bought)

Every task first gets one batch, sized and ordered by the warm-up plan (warmup.py: largest
share of the model's time first, small batches when the budget is small); then the gain
decides, except that a random task is picked with probability `eps`."""
from __future__ import annotations

import math
import random

from .base import TaskScheduler


@TaskScheduler.registry.register("gradient")
class GradientBased(TaskScheduler):
    """The default task scheduler (Ansor's): after the warm-up, the next batch goes to the task
    whose weighted best time is expected to drop most per trial."""

    def __init__(self, *, alpha: float = 0.2, window_size: int = 3, eps: float = 0.05,
                 seed: int = 0, **warmup):
        super().__init__(**warmup)
        if not 0 <= alpha <= 1 or window_size < 1 or not 0 <= eps <= 1:
            raise ValueError("GradientBased needs 0 <= alpha <= 1, window_size >= 1 and "
                             "0 <= eps <= 1")
        self.alpha = alpha
        self.window_size = window_size
        self.eps = eps
        self.rand = random.Random(seed)
        self.history: dict = {}  # task id -> [(trials, best seconds)] after each of its rounds

    def next_task_id(self) -> int:
        live = [i for i, t in enumerate(self.tasks) if not t.done]
        if not live:
            return -1
        for i in live:
            self._record(i)
        if self.plan is not None:  # the warm-up round, largest share first
            fresh = self.warmup_order()
        else:
            fresh = [i for i in live if len(self.history[i]) < 2]  # not yet given a batch
        if fresh:
            return fresh[0]
        if self.rand.random() < self.eps:
            return self.rand.choice(live)
        return max(live, key=lambda i: (self.gain(i), -i))

    def gain(self, i: int) -> float:
        """Expected decrease of the weighted objective per trial of task i (seconds)."""
        hist = self.history[i]
        trials, best = hist[-1]
        if not math.isfinite(best):  # nothing valid measured yet: worth trying first
            return math.inf
        old_trials, old_best = hist[max(0, len(hist) - 1 - self.window_size)]
        if not math.isfinite(old_best):
            old_best = best
        backward = (old_best - best) / max(1, trials - old_trials)
        forward = best / max(1, trials)
        return self.tasks[i].weight * (self.alpha * backward + (1 - self.alpha) * forward)

    def _record(self, i: int):
        t = self.tasks[i]
        hist = self.history.setdefault(i, [])
        if not hist or hist[-1][0] != t.trials:
            hist.append((t.trials, t.best_secs))
