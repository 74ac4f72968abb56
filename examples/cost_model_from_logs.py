"""A cost model trained from tuning logs, judged the way a search uses it: does it put the
fast schedules first? Tunes (or reads) a log of random schedules of a matmul, trains an
XGBModel on the older two thirds of the records (not those timed only once for being far
slower than the best: those are never labels), and on the newest third compares the
model's top-10 with the measured top-10: how many it shares, and Kendall's tau between the
predicted and measured order (over all held-out records, and over the measured top-10).

    python examples/cost_model_from_logs.py [--work-dir DIR] [--trials 128] [--size 256]
"""
from __future__ import annotations

import argparse
import tempfile

import numpy as np

from looptune import te
from looptune.te.ops import workload
from looptune.tune import EvaluatorConfig, tune_tir
from looptune.tune.cost_model import CostModel
from looptune.tune.cost_model.base import candidates_of_records
from looptune.tune.cost_model.metric import kendall_tau


def matmul(n: int):
    return te.create_prim_func(workload("matmul", M=n, N=n, K=n)[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work-dir", default=None, help="a work dir to tune into or read from")
    ap.add_argument("--trials", type=int, default=128)
    ap.add_argument("--size", type=int, default=256)
    args = ap.parse_args()
    func = matmul(args.size)
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="cost-model-log-")
    # random schedules (no model involved in choosing them), single-threaded
    db = tune_tir(func, "cpu", work_dir, max_trials_global=args.trials, num_trials_per_iter=16,
                  strategy="replay-trace", seed=0, evaluator=EvaluatorConfig(num_threads=1))
    recs = sorted((r for r in db.records_of(db.key_of(func)) if r.ok), key=lambda r: r.time)
    if len(recs) < 30:
        raise SystemExit(f"only {len(recs)} measured records in {work_dir}; tune more trials")
    cut = len(recs) * 2 // 3
    train = [r for r in recs[:cut] if not r.measure.get("aborted_early")]
    test = recs[cut:]
    model = CostModel.create("xgb")
    model.update(*candidates_of_records(train, func))
    cands, results = candidates_of_records(test, func)
    scores = np.asarray(model.predict(cands))
    secs = np.array([np.median(r.run_secs) for r in results])
    prior = np.asarray(CostModel.create("xgb").predict(cands))  # untrained: the analytic prior

    k = min(10, len(test))
    measured_top = set(np.argsort(secs)[:k])
    predicted_top = set(np.argsort(-scores)[:k])
    top = np.argsort(secs)[:k]
    print(f"matmul {args.size}: trained on {len(train)} records, tested on {len(test)} "
          f"(log: {work_dir})")
    print(f"Kendall tau, all held-out records: model {kendall_tau(scores, secs):+.3f}, "
          f"analytic prior {kendall_tau(prior, secs):+.3f} (the model adds "
          f"{getattr(model, 'blend', 1.0):.0%} of its trees' correction to the prior: the share "
          "that ranked its own held-out records best)")
    print(f"Kendall tau within the measured top-{k}: model "
          f"{kendall_tau(scores[top], secs[top]):+.3f}")
    print(f"the model's top-{k} holds {len(measured_top & predicted_top)} of the measured "
          f"top-{k}; the fastest held-out schedule is the model's #"
          f"{int(np.where(np.argsort(-scores) == np.argmin(secs))[0][0]) + 1}")
    print(f"{'rank':>4s} {'measured ms':>12s} {'model rank':>11s}")
    order = {int(i): r + 1 for r, i in enumerate(np.argsort(-scores))}
    for r, i in enumerate(top, 1):
        print(f"{r:4d} {secs[i] * 1e3:12.4f} {order[int(i)]:11d}")


if __name__ == "__main__":
    main()
