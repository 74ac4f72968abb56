"""CostModel: learns from measured candidates to rank unmeasured ones (higher score =
predicted faster), so the search builds only the promising ones.

Labels are throughputs normalised per workload: min_secs_seen / median(run_secs), in (0, 1];
a failed candidate is labelled 0 and an early-aborted one (timed once, far slower than the
best) is never a label. Candidates are grouped by the structural hash of their unscheduled
function, so one model can serve several workloads. A model saves as JSON (plus xgboost's own
JSON format for XGBModel), never pickle, with the feature version it was trained on.
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np

from ..feature import FEATURE_VERSION, FEATURE_WIDTH, FeatureExtractor
from ..registry import Registry

MODEL_FORMAT_VERSION = 1
FAILED_THROUGHPUT = 1e-3   # where log-throughput losses put a failure (0 has no log)


class CostModel:
    """The interface of a cost model: a subclass implements `_fit` and `_predict` on feature
    rows (and `_params`, `_state`, `_load_state` to be saved); the base extracts features,
    computes labels, ranks with the analytic prior before any training, and saves as JSON.
    Register with `@CostModel.registry.register("name")`."""

    registry = Registry("cost model")
    # predict reads nothing of a candidate but its feature rows, so candidates that search
    # workers replayed (search_strategy/workers.py) can be scored by the rows they bring; a
    # subclass whose predict reads the schedules sets this False
    scores_from_features = True

    def __init__(self, *, target=None, extractor="per-store"):
        """`target` (default: this machine) supplies the cache sizes the features compare
        against; `extractor` is a FeatureExtractor or its registered name."""
        from ...target import Target
        self.target = Target.create("cpu" if target is None else target)
        self._target_given = target is not None
        self.extractor = FeatureExtractor.create(extractor)
        self._feats: list = []     # one (rows, FEATURE_WIDTH) array per labelled candidate
        self._groups: list = []    # workload key of each
        self._secs: list = []      # median seconds of each; inf for a failure
        self.num_trained = 0       # candidates the current model was trained on (all time)

    @classmethod
    def create(cls, spec="xgb", **kwargs) -> "CostModel":
        """A cost model from its registered name ("xgb", "mlp", "random"), class or instance."""
        return cls.registry.create(spec, CostModel, **kwargs)

    # ------------------------------------------------------------------ the interface
    def update(self, candidates, results) -> None:
        """Learn from measured candidates (MeasureCandidate, RunnerResult pairs). The model is
        retrained on everything seen since it was created or loaded; a loaded model goes on
        from its saved state (its training data is not in the file: that lives in the
        database, see warm_start)."""
        if len(candidates) != len(results):
            raise ValueError(f"update got {len(candidates)} candidates but {len(results)} "
                             "results; pass one RunnerResult per candidate")
        keep = [(c, r) for c, r in zip(candidates, results) if not r.aborted_early]
        if not keep:
            return
        feats = self.features([c for c, _ in keep])
        for (c, r), f in zip(keep, feats):
            self._feats.append(f)
            self._groups.append(workload_key(c))
            self._secs.append(statistics.median(r.run_secs) if r.ok and r.run_secs
                              else math.inf)
        self.num_trained += len(keep)
        self._fit(self._feats, normalized_labels(self._secs, self._groups), self._groups)

    def predict(self, candidates) -> np.ndarray:
        """One score per candidate, higher = predicted faster. Before the model has learned
        anything it ranks by the analytic prior (prior.py)."""
        if not len(candidates):
            return np.zeros(0)
        feats = self.features(candidates)
        if not self.num_trained:
            return self.prior(feats)
        return np.asarray(self._predict(feats), dtype=np.float64)

    def use_target(self, target) -> None:
        """Tune on `target` (a search strategy calls this with its task's): a model created
        without a target takes it, so its features and prior are the GPU's on a cuda task;
        one given a target keeps it."""
        if not self._target_given:
            from ...target import Target
            self.target = Target.create(target)
            self._target_given = True

    def prior(self, feats: list) -> np.ndarray:
        """The analytic prior's scores (-log estimated cycles) of feature rows."""
        from .prior import gpu_prior_scores, prior_scores
        if self.target.kind == "cuda":
            return gpu_prior_scores(feats, self.target.cores)
        return prior_scores(feats, self.target.vector_lanes_f32)

    def features(self, candidates) -> list:
        """The feature rows of each candidate (one array per candidate), from this model's
        extractor on its target; a candidate a search worker replayed (PendingCandidate)
        brings the rows that worker extracted."""
        from ..search_strategy.workers import PendingCandidate
        key = (getattr(type(self.extractor), "registered_name", None), self.extractor.version)
        out = [None] * len(candidates)
        todo = []
        for i, c in enumerate(candidates):
            if isinstance(c, PendingCandidate):
                if c.features is None or c.extractor != key or c.target != self.target:
                    raise TypeError(f"a search worker's candidate brings no features of {key} "
                                    f"on {self.target}, and no schedule to extract them from")
                out[i] = c.features
            else:
                todo.append(i)
        if todo:
            for i, rows in zip(todo, self.extractor.extract([candidates[i] for i in todo],
                                                            target=self.target)):
                out[i] = rows
        return out

    def warm_start(self, database, target=None, *, exclude=None, max_records: int = 2000):
        """Train on the records of other workloads in `database` (on `target`, default this
        model's): each record's trace is replayed on its workload; records that no longer
        replay are skipped. `exclude`: workloads (PrimFuncs, Workloads or keys) to leave out,
        typically the one about to be tuned. Returns the number of records used."""
        cands, results = records_as_candidates(database, target or self.target, exclude=exclude,
                                               max_records=max_records)
        self.update(cands, results)
        return len(cands)

    # ------------------------------------------------------------------ persistence
    def save(self, path) -> None:
        """Write the model to `path` (JSON; XGBModel adds `<path>.xgb.json`)."""
        meta = {"looptune_cost_model": MODEL_FORMAT_VERSION, "kind": self.registered_name,
                "feature_version": self.extractor.version, "feature_width": self.extractor.width,
                "num_trained": self.num_trained, "target": self.target.to_json(),
                "params": self._params(), "state": self._state(Path(path))}
        tmp = Path(str(path) + ".tmp")
        tmp.write_text(json.dumps(meta))
        tmp.replace(path)

    @classmethod
    def load(cls, path) -> "CostModel":
        """A model written by save(); refuses one trained on features of another version."""
        try:
            meta = json.loads(Path(path).read_text())
        except (UnicodeDecodeError, json.JSONDecodeError):
            meta = None
        if not isinstance(meta, dict) or meta.get("looptune_cost_model") != MODEL_FORMAT_VERSION:
            raise ValueError(f"{path} is not a looptune cost model file of format "
                             f"{MODEL_FORMAT_VERSION}; write one with CostModel.save")
        if (meta["feature_version"], meta["feature_width"]) != (FEATURE_VERSION, FEATURE_WIDTH):
            raise ValueError(
                f"{path} was trained on features version {meta['feature_version']} "
                f"({meta['feature_width']} columns); this looptune extracts version "
                f"{FEATURE_VERSION} ({FEATURE_WIDTH} columns). Retrain it, e.g. "
                f"CostModel.create({meta['kind']!r}).warm_start(database, target)")
        model = cls.registry.create(meta["kind"], CostModel, target=meta["target"],
                                    **meta["params"])
        if not isinstance(model, cls):
            raise ValueError(f"{path} holds a {type(model).__name__}, not a {cls.__name__}; "
                             "load it with CostModel.load")
        model.num_trained = meta["num_trained"]
        model._load_state(meta["state"], Path(path))
        return model

    # ------------------------------------------------------------------ for implementations
    def _fit(self, feats: list, labels: np.ndarray, groups: list) -> None:
        raise NotImplementedError

    def _predict(self, feats: list) -> np.ndarray:
        raise NotImplementedError

    def _params(self) -> dict:
        """Constructor keyword arguments to save (JSON values)."""
        return {}

    def _state(self, path: Path) -> dict:
        """The learned state as JSON values (may write a sidecar next to `path`)."""
        return {}

    def _load_state(self, state: dict, path: Path) -> None:
        pass

    def __repr__(self):
        return f"{type(self).__name__}(trained on {self.num_trained})"


def records_as_candidates(database, target, *, exclude=None, max_records: int = 2000):
    """(candidates, results) rebuilt from the newest `max_records` usable records of
    `database` on `target`: early-aborted records and excluded workloads are left out, and a
    record whose trace no longer replays is skipped."""
    from ...target import Target
    from ...tir.func import PrimFunc
    tkey = Target.create(target).key()
    if exclude is None:
        exclude = ()
    elif isinstance(exclude, (str, PrimFunc)) or hasattr(exclude, "key"):
        exclude = (exclude,)
    skip = {x if isinstance(x, str) else
            x.key if hasattr(x, "key") and isinstance(x.key, str) else database.key_of(x)
            for x in exclude}
    recs = [r for r in database.get_all_tuning_records()
            if r.workload.key not in skip and r.target.key() == tkey
            and not r.measure.get("aborted_early") and r.error_class != "schedule_error"]
    recs.sort(key=lambda r: r.time)
    return candidates_of_records(recs[-max_records:] if max_records else [])


def candidates_of_records(records, func=None):
    """(candidates, results) of tuning records, each trace replayed on `func` (default: the
    record's workload); a record whose trace no longer replays is skipped."""
    from ...schedule import ScheduleError
    from ..replay import replay
    from ..runner.base import RunnerResult
    from ..search_strategy.base import MeasureCandidate
    cands, results = [], []
    for rec in records:
        try:
            sch = replay(rec, func if func is not None else rec.workload.func)
        except ScheduleError:
            continue
        cands.append(MeasureCandidate(sch, rec.sch_hash or ""))
        results.append(RunnerResult(run_secs=rec.run_secs, error_class=rec.error_class))
    return cands, results


def normalized_labels(secs, groups) -> np.ndarray:
    """min_secs_of_group / secs for each candidate; 0 for failures (inf secs)."""
    secs = np.asarray(secs, dtype=np.float64)
    best: dict = {}
    for s, g in zip(secs, groups):
        if math.isfinite(s) and s > 0:
            best[g] = min(best.get(g, s), s)
    out = np.zeros(len(secs))
    for i, (s, g) in enumerate(zip(secs, groups)):
        if math.isfinite(s) and s > 0:
            out[i] = best[g] / s
    return out


def log_labels(labels) -> np.ndarray:
    """log of normalised throughputs, failures (0) at log(FAILED_THROUGHPUT)."""
    return np.log(np.maximum(np.asarray(labels, dtype=np.float64), FAILED_THROUGHPUT))


_KEYS: dict = {}


def workload_key(cand) -> str:
    """The structural hash of a candidate's unscheduled function (cached per function)."""
    func = cand.sch.original
    hit = _KEYS.get(id(func))
    if hit is None or hit[0] is not func:
        from ...tir.structural import structural_hash
        if len(_KEYS) > 1024:
            _KEYS.clear()
        hit = _KEYS[id(func)] = (func, structural_hash(func))
    return hit[1]


def aggregate(feats: list) -> np.ndarray:
    """One fixed vector per candidate from its rows: the sum over rows (summed before the
    log transform, so totals stay totals), the max over rows, and the row count."""
    from ..feature.per_store import LOG_COLUMNS
    out = np.zeros((len(feats), 2 * FEATURE_WIDTH + 1), dtype=np.float32)
    for i, f in enumerate(feats):
        if not len(f):
            continue
        f = f.astype(np.float64)
        lin = np.where(LOG_COLUMNS, np.exp2(f) - 1.0, f)
        total = lin.sum(axis=0)
        out[i, :FEATURE_WIDTH] = np.where(LOG_COLUMNS, np.log2(1.0 + total), total)
        out[i, FEATURE_WIDTH:2 * FEATURE_WIDTH] = f.max(axis=0)
        out[i, -1] = len(f)
    return out
