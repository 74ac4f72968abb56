"""XGBModel: gradient-boosted trees on program features, retrained on everything seen at
each update (Ansor's and MetaSchedule's default model).

Objectives:
- "pack-sum" (Ansor): every store row gets a score and a candidate's score is the sum over its
  rows; a custom objective fits that sum to the normalised throughput, weighted by it (fast
  candidates matter most; failures keep a small weight so they still learn to score low).
- "rank": rows aggregated per candidate (sum, max, count), `rank:pairwise` within a workload.
- "reg": the same aggregated rows plus the analytic prior's score (prior.py) as a column,
  `reg:squarederror` on log throughput (failures at log(FAILED_THROUGHPUT)), boosted from
  the prior (xgboost's base margin): the trees learn the prior's error. Predictions add the
  share `blend` of that correction to the prior; `blend` is chosen on held-out
  measurements at every update, so a few measurements cannot talk the model out of a good
  prior and many can.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .base import CostModel, aggregate, log_labels

OBJECTIVES = ("pack-sum", "rank", "reg")
MIN_WEIGHT = 0.05  # pack-sum weight of a failure (label 0)
BLENDS = (0.0, 0.25, 0.5, 1.0)  # "reg": weights of the trees' correction to the prior


@CostModel.registry.register("xgb")
class XGBModel(CostModel):
    """The default cost model: gradient-boosted trees (objective "reg", "rank" or "pack-sum":
    the module docstring), retrained on everything seen at each update."""

    def __init__(self, *, objective: str = "reg", num_rounds: int = 64, max_depth: int = 6,
                 eta: float = 0.2, min_child_weight: float = 1.0, max_bin: int = 64,
                 seed: int = 0, nthread: int = 1, target=None, extractor="per-store"):
        """Defaults: `objective` "reg" (it ranked best on held-out measurements), 64 boosting
        rounds of depth-6 trees with eta 0.2 on 64-bin histograms (about 0.2 s of CPU for
        1000 candidates), `nthread` 1 so training does not compete with the builds, `seed` 0."""
        super().__init__(target=target, extractor=extractor)
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown XGBModel objective {objective!r}; use one of {OBJECTIVES}")
        self.objective = objective
        self.num_rounds = num_rounds
        self.max_depth = max_depth
        self.eta = eta
        self.min_child_weight = min_child_weight
        self.seed = seed
        self.nthread = nthread
        self.max_bin = max_bin
        self.booster = None   # the trained xgboost.Booster; None: predict returns zeros
        self._base = None     # a loaded booster that training continues from
        self.blend = 1.0      # "reg": share of the trees' correction added to the prior

    def _xgb_params(self) -> dict:
        p = {"max_depth": self.max_depth, "eta": self.eta, "seed": self.seed,
             "nthread": self.nthread, "min_child_weight": self.min_child_weight,
             "verbosity": 0, "tree_method": "hist", "max_bin": self.max_bin}
        if self.objective == "rank":
            p["objective"] = "rank:pairwise"
        elif self.objective == "reg":
            p["objective"] = "reg:squarederror"
        else:
            p["base_score"] = 0.0
            p["disable_default_eval_metric"] = 1
        return p

    def _fit(self, feats, labels, groups) -> None:
        import xgboost as xgb
        params = self._xgb_params()
        if self.objective == "pack-sum":
            rows, ids = _stack(feats)
            dtrain = xgb.DMatrix(rows)
            weight = np.maximum(labels, MIN_WEIGHT)
            n = len(feats)

            def pack_sum_square_error(preds, _dtrain):
                total = np.bincount(ids, weights=preds, minlength=n)
                return (weight * (total - labels))[ids], weight[ids]

            self.booster = xgb.train(params, dtrain, self.num_rounds, obj=pack_sum_square_error,
                                     xgb_model=self._base)
            return
        x = aggregate(feats)
        if self.objective == "rank":
            gid = {g: i for i, g in enumerate(dict.fromkeys(groups))}
            qid = np.array([gid[g] for g in groups])
            order = np.argsort(qid, kind="stable")
            dtrain = xgb.DMatrix(x[order], label=labels[order], qid=qid[order])
        else:
            prior = self.prior(feats)
            x = _with_column(x, prior)
            dtrain = xgb.DMatrix(x, label=log_labels(labels),
                                 base_margin=prior + self._shift(prior, labels, groups))
            self.blend = self._choose_blend(x, prior, labels, groups)
        self.booster = xgb.train(params, dtrain, self.num_rounds, xgb_model=self._base)

    def _choose_blend(self, x, prior, labels, groups) -> float:
        """How much of the trees' correction to add to the prior: the weight in BLENDS that
        orders held-out candidates best (Kendall tau per workload), each of the newest two
        fifths held out in turn while the trees learn from the rest. Few measurements
        overfit, and the prior alone then ranks better; the weight grows as the trees earn
        it."""
        import xgboost as xgb
        from .metric import kendall_tau
        n = len(labels)
        hold = max(16, n // 5)
        groups = np.asarray(groups, dtype=object)
        parts = []   # (prior, tree correction, seconds) of one workload in one held-out fold
        for k in (1, 2):
            lo, hi = n - k * hold, n - (k - 1) * hold
            if lo < 16:
                break
            tr = np.r_[0:lo, hi:n]
            dtr = xgb.DMatrix(x[tr], label=log_labels(labels[tr]),
                              base_margin=prior[tr] + self._shift(prior[tr], labels[tr],
                                                                  groups[tr]))
            booster = xgb.train(self._xgb_params(), dtr, self.num_rounds)
            tree = booster.predict(xgb.DMatrix(x[lo:hi], base_margin=prior[lo:hi]),
                                   output_margin=True) - prior[lo:hi]
            secs = np.where(labels[lo:hi] > 0, 1.0 / np.maximum(labels[lo:hi], 1e-12), np.inf)
            for g in dict.fromkeys(groups[lo:hi]):
                m = groups[lo:hi] == g
                if m.sum() >= 8 and np.isfinite(secs[m]).sum() >= 2:
                    parts.append((prior[lo:hi][m], tree[m], secs[m]))
        if not parts:
            return 0.0

        def tau(w):
            vals = [kendall_tau(p + w * t, sec) for p, t, sec in parts]
            vals = [v for v in vals if v == v]
            return float(np.mean(vals)) if vals else -1.0
        best_w, best_tau = 0.0, tau(0.0)
        for w in BLENDS[1:]:
            t = tau(w)
            if t > best_tau + 0.02:  # the trees must clearly beat the prior
                best_w, best_tau = w, t
        return best_w

    @staticmethod
    def _shift(prior, labels, groups) -> np.ndarray:
        """Per candidate, the constant that moves its workload's prior onto the scale of its
        log labels (the median gap over successful candidates); predictions rank within a
        workload, so they leave it out."""
        logs = log_labels(labels)
        groups = np.asarray(groups, dtype=object)
        out = np.zeros(len(labels))
        for g in dict.fromkeys(groups):
            m = groups == g
            ok = m & (np.asarray(labels) > 0)
            out[m] = float(np.median(logs[ok] - prior[ok])) if ok.any() else 0.0
        return out

    def _predict(self, feats) -> np.ndarray:
        if self.booster is None:
            return self.prior(feats)
        import xgboost as xgb
        if self.objective == "pack-sum":
            rows, ids = _stack(feats)
            if not len(rows):
                return np.zeros(len(feats))
            preds = self.booster.predict(xgb.DMatrix(rows), output_margin=True)
            return np.bincount(ids, weights=preds, minlength=len(feats))
        if self.objective != "reg":
            return self.booster.predict(xgb.DMatrix(aggregate(feats)), output_margin=True)
        prior = self.prior(feats)
        raw = self.booster.predict(xgb.DMatrix(_with_column(aggregate(feats), prior),
                                               base_margin=prior), output_margin=True)
        return prior + self.blend * (raw - prior)

    def _params(self) -> dict:
        return {"objective": self.objective, "num_rounds": self.num_rounds,
                "max_depth": self.max_depth, "eta": self.eta,
                "min_child_weight": self.min_child_weight, "max_bin": self.max_bin,
                "seed": self.seed, "nthread": self.nthread}

    def _state(self, path: Path) -> dict:
        if self.booster is None:
            return {"booster": None}
        side = Path(str(path) + ".xgb.json")
        self.booster.save_model(str(side))  # xgboost's own JSON format
        return {"booster": side.name, "blend": self.blend}

    def _load_state(self, state: dict, path: Path) -> None:
        if state.get("booster") is None:
            return
        import xgboost as xgb
        side = Path(path).parent / state["booster"]
        if not side.exists():
            raise ValueError(f"{path} refers to the xgboost model {side}, which is missing; "
                             "copy it next to the model file")
        self.booster = xgb.Booster(params={"nthread": self.nthread}, model_file=str(side))
        self._base = self.booster
        self.blend = float(state.get("blend", 1.0))


def _with_column(x, column):
    """The aggregated rows with one more column (the prior's score)."""
    return np.concatenate([x, np.asarray(column, dtype=np.float32)[:, None]], axis=1)


def _stack(feats):
    """All rows stacked, and the candidate index of each row."""
    if not feats:
        return np.zeros((0, 0), dtype=np.float32), np.zeros(0, dtype=np.int64)
    rows = np.concatenate(feats)
    ids = np.repeat(np.arange(len(feats)), [len(f) for f in feats])
    return rows, ids
