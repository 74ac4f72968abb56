"""XGB-guided search (AutoTVM's XGBTuner): a cost model learns from the measured configs,
simulated annealing over the model's predictions plans the next `plan_size` configs, and
batches are taken from the plan (with probability `eps` a random config instead). The model is retrained, and the plan
redone, every `retrain_every` measurements once `min_train` have been made (AutoTVM waits
for a whole plan: `retrain_every=plan_size`). A space of at most `exhaustive_limit` configs
is planned by scoring every config instead of annealing.

`feature_type`: "knob" (default) learns with XGBoost on the knob values (ConfigSpace.features:
log2 split factors, knob values), cheap enough to anneal over thousands of configs;
"schedule" uses looptune's cost model (`cost_model`, default "xgb") on the features of each
config's scheduled program, which before any measurement ranks by its analytic prior, at
the price of building each config's schedule the annealing visits.
"""
from __future__ import annotations

import math

import numpy as np

from ...tune.cost_model.base import log_labels, normalized_labels
from ...tune.search_strategy.base import SearchStrategy
from ..error import TemplateError
from .base import TemplateSearch

FEATURE_TYPES = ("knob", "schedule")


class KnobModel:
    """XGBoost regression of log normalised throughput (cost_model.base's labels) on knob
    features; higher predictions = faster."""

    def __init__(self, *, num_rounds: int = 64, max_depth: int = 4, eta: float = 0.3,
                 seed: int = 0, nthread: int = 1):
        self.params = {"max_depth": max_depth, "eta": eta, "seed": seed, "nthread": nthread,
                       "objective": "reg:squarederror", "verbosity": 0, "min_child_weight": 1}
        self.num_rounds = num_rounds
        self.booster = None

    def fit(self, x: np.ndarray, secs: list) -> None:
        import xgboost as xgb
        labels = log_labels(normalized_labels(secs, [0] * len(secs)))
        self.booster = xgb.train(self.params, xgb.DMatrix(x, label=labels), self.num_rounds)

    def predict(self, x: np.ndarray) -> np.ndarray:
        if self.booster is None:
            return np.zeros(len(x))
        return self.booster.inplace_predict(x)  # no DMatrix: this runs for every annealing step


def anneal(space, score, num: int, exclude: set, rand, *, points: int, iters: int,
           temp: float = 1.0, seeds=()) -> list:
    """Up to `num` config indices not in `exclude` with the highest `score(indices)` seen by
    `points` parallel annealing walks of `iters` steps (a step: one neighbour, or one knob set
    to a random value), the temperature falling linearly from `temp` to 0."""
    total = len(space)
    cur = list(seeds)[:points]
    cur += [rand.randrange(total) for _ in range(points - len(cur))]
    cur_s = score(cur)
    best: dict = {i: s for i, s in zip(cur, cur_s) if i not in exclude}
    dims = space.dims
    for step in range(iters):
        t = temp * (1 - step / iters)
        new = []
        for i in cur:
            near = space.neighbors(i) if rand.random() < 0.5 else None
            if near:
                new.append(rand.choice(near))
            else:
                subs = list(space.subindices(i).values())
                k = rand.randrange(len(dims))
                subs[k] = rand.randrange(dims[k])
                new.append(space.index_of(subs))
        new_s = score(new)
        for k, (i, s) in enumerate(zip(new, new_s)):
            if i not in exclude:
                best[i] = s
            d = s - cur_s[k]
            if d >= 0 or (t > 0 and math.isfinite(d) and rand.random() < math.exp(d / t)):
                cur[k], cur_s[k] = i, s
    ranked = sorted(best.items(), key=lambda kv: -kv[1])
    return [i for i, s in ranked[:num] if s > -math.inf]


AUTOTVM_FEATURE_TYPES = {"itervar": "schedule", "curve": "schedule"}


@SearchStrategy.registry.register("template-xgb")
class XGBSearch(TemplateSearch):
    """AutoTVM's XGBTuner ("template-xgb"): a cost model ranks the configs and batches come from
    its plan (options in the module docstring)."""

    def __init__(self, *, plan_size: int = 64, feature_type: str = "knob", cost_model=None,
                 eps: float = 0.05, sa_points: int | None = None, sa_iters: int | None = None,
                 retrain_every: int = 8, min_train: int = 16, exhaustive_limit: int = 50_000,
                 early_stopping: int | None = None):
        super().__init__(early_stopping=early_stopping)
        # AutoTVM's features of the lowered loops ("itervar", "curve"): the scheduled IR's
        feature_type = AUTOTVM_FEATURE_TYPES.get(feature_type, feature_type)
        if feature_type not in FEATURE_TYPES:
            raise TemplateError(f"XGBTuner: unknown feature_type {feature_type!r}; use one of "
                                f"{FEATURE_TYPES}")
        self.feature_type = feature_type
        self.plan_size = plan_size
        self.eps = eps
        self.retrain_every = max(1, retrain_every)
        self.min_train = max(1, min_train)
        self.exhaustive_limit = exhaustive_limit if feature_type == "knob" else 0
        knob = feature_type == "knob"
        self.sa_points = sa_points or (128 if knob else 32)
        self.sa_iters = sa_iters or (100 if knob else 8)
        self.model_spec = cost_model

    def setup(self) -> None:
        if self.feature_type == "knob":
            self.model = KnobModel(seed=self.seed % (1 << 31))
        else:
            from ...tune.cost_model.base import CostModel
            self.model = CostModel.create(self.model_spec or "xgb", target=self.task.target)
        self._trained_at = 0        # measurements when the model was last trained
        self.plan: list = []
        self.planned = False
        self.measured: list = []    # (config index, MeasureInput, MeasureResult)
        self.train_ct = 0
        self._trained = 0           # "schedule": measurements the cost model has seen
        self._feats: dict = {}      # config index -> knob features
        self._cands: dict = {}      # config index -> MeasureInput (or None: refused)

    def next_batch(self, n: int) -> list:
        if not self.planned and self.feature_type == "schedule":
            self.replan()  # the untrained model ranks by its analytic prior
        out: list = []
        while len(out) < n:
            if self.plan and self.rand.random() >= self.eps:
                i = self.plan.pop(0)
                if i in self.visited or i in out:
                    continue
                out.append(i)
            else:
                more = self.random_unvisited(1, exclude=out)
                if not more:
                    break
                out += more
        return out

    def update(self, inputs, results) -> None:
        for inp, res in zip(inputs, results):
            self.measured.append((inp.config.index, inp, res))
        n = len(self.measured)
        if n >= self.min_train and n - self._trained_at >= self.retrain_every and any(
                r.ok for _, _, r in self.measured):
            self._trained_at = n
            self.train()
            self.replan()
            self.train_ct += 1

    # ------------------------------------------------------------------ the model
    def train(self) -> None:
        keep = [(i, inp, r) for i, inp, r in self.measured if not r.aborted_early]
        if self.feature_type == "knob":
            self.model.fit(self.knob_features([i for i, _, _ in keep]), [r.secs for _, _, r in keep])
            return
        pairs = [(self.candidate(i, inp), r) for i, inp, r in keep]
        pairs = [(c, r.as_runner_result()) for c, r in pairs if c is not None]
        fresh, self._trained = pairs[self._trained:], len(pairs)
        if fresh:  # CostModel.update keeps what it learned before
            self.model.update([c for c, _ in fresh], [r for _, r in fresh])

    def replan(self) -> None:
        self.planned = True
        if len(self.space) <= self.exhaustive_limit:
            left = [i for i in range(len(self.space)) if i not in self.visited]
            if not len(left):
                self.plan = []
                return
            scores = self.score(left)
            top = np.argsort(-scores, kind="stable")[:self.plan_size]
            self.plan = [left[int(k)] for k in top]
            return
        best = sorted((r.secs, i) for i, _, r in self.measured if r.ok)[:self.sa_points // 4]
        self.plan = anneal(self.space, self.score, self.plan_size, self.visited, self.rand,
                           points=self.sa_points, iters=self.sa_iters,
                           seeds=[i for _, i in best])

    def score(self, indices: list) -> np.ndarray:
        if self.feature_type == "knob":
            return np.asarray(self.model.predict(self.knob_features(indices)), dtype=np.float64)
        cands = [self.candidate(i) for i in indices]
        ok = [c for c in cands if c is not None]
        pred = iter(self.model.predict(ok) if ok else [])
        return np.array([next(pred) if c is not None else -math.inf for c in cands])

    def knob_features(self, indices: list) -> np.ndarray:
        rows = []
        for i in indices:
            f = self._feats.get(i)
            if f is None:
                f = self._feats[i] = self.space.features(i)
            rows.append(f)
        return np.asarray(rows, dtype=np.float32)

    def candidate(self, index: int, inp=None):
        """The measure candidate of config `index` (None if the template refuses it)."""
        if index not in self._cands:
            if len(self._cands) > 4096:  # keep the measured ones, drop the rest
                keep = {i for i, _, _ in self.measured}
                self._cands = {i: c for i, c in self._cands.items() if i in keep}
            inp = inp or self.design.candidate(index)
            self._cands[index] = None if inp.refused else inp
        return self._cands[index]

    def make_candidate(self, config):
        """Reuse the schedule that scoring made for this config, if any."""
        return self._cands.get(config.index) or super().make_candidate(config)
