"""MLPModel: a small numpy multilayer perceptron on per-candidate aggregated features, trained
with Adam; a learned model that needs no library beyond numpy.

Inputs are standardised with the training set's mean and spread. The loss is "rank" (RankNet:
logistic loss on score differences of candidate pairs of one workload whose labels differ) or
"mse" (squared error against the log throughput).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .base import CostModel, aggregate, log_labels

LOSSES = ("rank", "mse")


@CostModel.registry.register("mlp")
class MLPModel(CostModel):
    """A learned cost model in plain numpy, for machines without xgboost or to compare against
    it."""

    def __init__(self, *, hidden: tuple = (64, 64), loss: str = "rank", steps: int = 300,
                 batch: int = 256, lr: float = 3e-3, weight_decay: float = 1e-4, seed: int = 0,
                 target=None, extractor="per-store"):
        """Defaults: two hidden layers of 64 ReLU units, the "rank" loss, 300 Adam steps on
        batches of 256 candidates at learning rate 3e-3, `seed` 0 for the initial weights and
        the batches (training is deterministic)."""
        super().__init__(target=target, extractor=extractor)
        if loss not in LOSSES:
            raise ValueError(f"unknown MLPModel loss {loss!r}; use one of {LOSSES}")
        self.hidden = tuple(int(h) for h in hidden)
        self.loss, self.steps, self.batch = loss, steps, batch
        self.lr, self.weight_decay, self.seed = lr, weight_decay, seed
        self.weights = None   # [(W, b), ...]; None: predict returns zeros
        self.mean = self.scale = None
        self._resume = False  # loaded: training continues from the saved weights

    # ------------------------------------------------------------------ network
    def _forward(self, x):
        acts = [x]
        for i, (w, b) in enumerate(self.weights):
            x = _mm(x, w) + b
            if i < len(self.weights) - 1:
                x = np.maximum(x, 0.0)
            acts.append(x)
        return x[:, 0], acts

    def _backward(self, acts, dout):
        grads = [None] * len(self.weights)
        g = dout[:, None]
        for i in range(len(self.weights) - 1, -1, -1):
            w, _ = self.weights[i]
            grads[i] = (_mm(acts[i].T, g) + self.weight_decay * w, g.sum(axis=0))
            if i:
                g = _mm(g, w.T) * (acts[i] > 0)
        return grads

    def _init(self, n_in, rng):
        sizes = (n_in, *self.hidden, 1)
        self.weights = [(rng.normal(0.0, np.sqrt(2.0 / a), (a, b)).astype(np.float32),
                         np.zeros(b, dtype=np.float32)) for a, b in zip(sizes, sizes[1:])]

    # ------------------------------------------------------------------ training
    def _fit(self, feats, labels, groups) -> None:
        x = aggregate(feats).astype(np.float32)
        rng = np.random.default_rng(self.seed)
        if not self._resume:
            self.mean = x.mean(axis=0)
            self.scale = np.maximum(x.std(axis=0), 1e-6)
            self._init(x.shape[1], rng)
        x = (x - self.mean) / self.scale
        gid = {g: i for i, g in enumerate(dict.fromkeys(groups))}
        group = np.array([gid[g] for g in groups])
        params = [p for wb in self.weights for p in wb]
        adam = _Adam(params, lr=self.lr)
        for _ in range(self.steps):
            idx = rng.choice(len(x), size=min(self.batch, len(x)), replace=False)
            out, acts = self._forward(x[idx])
            dout = self._loss_grad(out, labels[idx], group[idx]).astype(np.float32)
            grads = [g for wb in self._backward(acts, dout) for g in wb]
            params = adam.step(params, grads)
            self.weights = list(zip(params[::2], params[1::2]))

    def _loss_grad(self, out, y, group):
        """d(loss)/d(out) for one batch."""
        if self.loss == "mse":
            return 2.0 * (out - log_labels(y)) / len(y)
        better = (y[:, None] > y[None, :]) & (group[:, None] == group[None, :])
        n = better.sum()
        if n == 0:
            return np.zeros_like(out)
        diff = out[:, None] - out[None, :]
        # loss = mean over pairs (i better than j) of log(1 + exp(-(s_i - s_j)))
        g = np.where(better, -0.5 * (1.0 - np.tanh(0.5 * diff)), 0.0) / n  # -sigmoid(-diff)/n
        return g.sum(axis=1) - g.sum(axis=0)

    def _predict(self, feats) -> np.ndarray:
        if self.weights is None:
            return np.zeros(len(feats))
        x = (aggregate(feats).astype(np.float32) - self.mean) / self.scale
        return self._forward(x)[0]

    # ------------------------------------------------------------------ persistence
    def _params(self) -> dict:
        return {"hidden": list(self.hidden), "loss": self.loss, "steps": self.steps,
                "batch": self.batch, "lr": self.lr, "weight_decay": self.weight_decay,
                "seed": self.seed}

    def _state(self, path: Path) -> dict:
        if self.weights is None:
            return {"weights": None}
        # float32 values widen to Python floats and parse back exactly
        return {"weights": [[w.tolist(), b.tolist()] for w, b in self.weights],
                "mean": self.mean.tolist(), "scale": self.scale.tolist()}

    def _load_state(self, state: dict, path: Path) -> None:
        if state.get("weights") is None:
            return
        self.weights = [(np.array(w, dtype=np.float32), np.array(b, dtype=np.float32))
                        for w, b in state["weights"]]
        self.mean = np.array(state["mean"], dtype=np.float32)
        self.scale = np.array(state["scale"], dtype=np.float32)
        self._resume = True


def _mm(a, b, *, limit: int = 200_000):
    """a @ b, in row blocks of under `limit` multiply-adds: OpenBLAS runs larger products on
    all its threads, which spin and crawl (10-100x slower) on a machine busy with builds, as
    a tuning machine is. Small blocks stay on the calling thread."""
    rows = max(1, limit // max(1, a.shape[1] * b.shape[1]))
    if a.shape[0] <= rows:
        return a @ b
    return np.concatenate([a[i:i + rows] @ b for i in range(0, a.shape[0], rows)])


class _Adam:
    """Adam (Kingma & Ba) over a list of float32 arrays."""

    def __init__(self, params, *, lr, b1=0.9, b2=0.999, eps=1e-8):
        self.lr, self.b1, self.b2, self.eps, self.t = lr, b1, b2, eps, 0
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]

    def step(self, params, grads) -> list:
        self.t += 1
        c1, c2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        out = []
        for k, (p, g) in enumerate(zip(params, grads)):
            self.m[k] = self.b1 * self.m[k] + (1 - self.b1) * g
            self.v[k] = self.b2 * self.v[k] + (1 - self.b2) * g * g
            step = self.lr * (self.m[k] / c1) / (np.sqrt(self.v[k] / c2) + self.eps)
            out.append((p - step).astype(np.float32))
        return out
