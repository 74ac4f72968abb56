"""Whole models end to end, single-threaded: torch eager, ONNX Runtime, looptune untuned
(rule-based default schedules) and looptune tuned (tune_model under a trial or time budget),
all measured in the same run with seeded random weights; every looptune output is checked
against torch.

  - mlp: TVM MetaSchedule tutorial's MLP, 784 -> 256 relu -> 10 (no bias), batch 1;
  - resnet18: ResNet-18 written in plain torch, batch 1, 3x224x224;
  - bert_tiny: a BERT-tiny-like encoder (token + position embeddings, 2 layers, hidden 128,
    2 heads, FFN 512, GELU), sequence 128.

Targets (issue 8): tuned >= 1.0x ONNX Runtime on every model (<= 45 min of tuning each) and
>= 1.5x torch eager on the MLP; untuned within 3x of ONNX Runtime.

    python benchmarks/models.py [--models mlp resnet18 bert_tiny] [--trials 64] \
        [--time-per-model 2700] [--json out.json] [--png out.png] [--work-dir D]

--trials 0 skips tuning (untuned only). ONNX Runtime needs `pip install onnxruntime`.
"""
from __future__ import annotations

import argparse
import io
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: E402  (single-threaded BLAS before numpy loads)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import looptune  # noqa: E402

torch.set_num_threads(1)


# ---------------------------------------------------------------------- models
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 10, bias=False)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self, layers=(2, 2, 2, 2), classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for i, n in enumerate(layers):
            cout = 64 * 2 ** i
            for j in range(n):
                blocks.append(Block(cin, cout, 2 if j == 0 and i > 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        y = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


class EncoderLayer(nn.Module):
    def __init__(self, hidden=128, heads=2, ffn=512):
        super().__init__()
        self.heads, self.d = heads, hidden // heads
        self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
        self.o = nn.Linear(hidden, hidden)
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.f1, self.f2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def forward(self, x):
        b, s, h = x.shape

        def heads(t):
            return t.view(b, s, self.heads, self.d).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        att = torch.softmax(q @ k.transpose(-1, -2) * (1 / math.sqrt(self.d)), dim=-1)
        ctx = (att @ v).transpose(1, 2).reshape(b, s, h)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.f2(nn.functional.gelu(self.f1(x))))


class BertTiny(nn.Module):
    def __init__(self, vocab=1000, seq=128, hidden=128, layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Parameter(torch.randn(1, seq, hidden) * 0.02)
        self.ln = nn.LayerNorm(hidden)
        self.layers = nn.Sequential(*(EncoderLayer(hidden) for _ in range(layers)))

    def forward(self, ids):
        return self.layers(self.ln(self.tok(ids) + self.pos))


def make(name):
    torch.manual_seed(0)
    if name == "mlp":
        return MLP().eval(), (torch.randn(1, 784),)
    if name == "resnet18":
        m = ResNet().eval()
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                with torch.no_grad():
                    mod.running_mean.uniform_(-0.1, 0.1)
                    mod.running_var.uniform_(0.5, 1.5)
        return m, (torch.randn(1, 3, 224, 224),)
    if name == "bert_tiny":
        return BertTiny().eval(), (torch.randint(0, 1000, (1, 128)),)
    raise ValueError(name)


# ---------------------------------------------------------------------- baselines
def ort_session(model, inputs):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    f = io.BytesIO()
    torch.onnx.export(model, inputs, f, dynamo=False, opset_version=17)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(f.getvalue(), opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    feeds = {n: x.numpy() for n, x in zip(names, inputs)}
    return lambda: sess.run(None, feeds)


def bench(name, args, out_dir: Path) -> dict:
    model, inputs = make(name)
    arrays = [x.numpy() for x in inputs]
    with torch.no_grad():
        want = model(*inputs).numpy()
        t_torch = _common.median_seconds(lambda: model(*inputs), repeat=args.repeat)
    run_ort = ort_session(model, inputs)
    t_ort = _common.median_seconds(run_ort, repeat=args.repeat) if run_ort else None

    graph = looptune.from_torch(model, inputs)
    tasks = looptune.extract_tasks(graph)
    untuned = looptune.compile_model(graph, None, "cpu", num_threads=1)
    np.testing.assert_allclose(untuned(*arrays), want, rtol=2e-3, atol=2e-3)
    t_un = _common.median_seconds(lambda: untuned(*arrays), repeat=args.repeat)
    row = {"model": name, "tasks": len(tasks), "kernels": untuned.desc["kernels"],
           "torch_ms": t_torch * 1e3, "ort_ms": t_ort and t_ort * 1e3,
           "untuned_ms": t_un * 1e3, "trials": 0, "tuning_s": 0.0, "tuned_ms": None}
    if args.trials or args.measure_only:
        work = out_dir / f"work_{name}"
        t0 = time.time()
        if args.measure_only:  # an earlier run's database, as it is: no tuning
            from looptune.tune.database.sqlite import SQLiteDatabase
            if not (work / "database.sqlite").exists():
                raise SystemExit(f"--measure-only: no database in {work}; tune first")
            db = SQLiteDatabase(work_dir=work)
            times = [r.time for r in db.get_all_tuning_records()]
            row["tuning_s"] = max(times) - min(times) if times else 0.0
        else:
            db = looptune.tune_model(graph, "cpu", work, max_trials_global=args.trials,
                                     num_trials_per_iter=args.per_iter, seed=0,
                                     max_time_s=args.time_per_model, num_threads=1)
            row["tuning_s"] = time.time() - t0
        row["trials"] = len(db.get_all_tuning_records())
        tuned = looptune.compile_model(graph, db, "cpu", num_threads=1)
        np.testing.assert_allclose(tuned(*arrays), want, rtol=2e-3, atol=2e-3)
        row["tuned_ms"] = _common.median_seconds(lambda: tuned(*arrays), repeat=args.repeat) * 1e3
    best = row["tuned_ms"] or row["untuned_ms"]
    row["vs_ort"] = row["ort_ms"] / best if row["ort_ms"] else None
    row["vs_torch"] = row["torch_ms"] / best
    row["untuned_vs_ort"] = row["ort_ms"] / row["untuned_ms"] if row["ort_ms"] else None
    print(f"  {name}: torch {row['torch_ms']:.3f} ms, ORT {row['ort_ms'] or float('nan'):.3f} ms, "
          f"looptune untuned {row['untuned_ms']:.3f} ms"
          + (f", tuned {row['tuned_ms']:.3f} ms ({row['trials']} trials, "
             f"{row['tuning_s']:.0f} s)" if row["tuned_ms"] else ""), flush=True)
    return row


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4))
    kinds = [("torch_ms", "torch eager"), ("ort_ms", "ONNX Runtime"),
             ("untuned_ms", "looptune untuned"), ("tuned_ms", "looptune tuned")]
    w = 0.2
    for i, (k, label) in enumerate(kinds):
        vals = [(r[k] / r["ort_ms"]) if r.get(k) and r.get("ort_ms") else 0 for r in rows]
        ax.bar([j + i * w for j in range(len(rows))], vals, w, label=label)
    ax.set_xticks([j + 1.5 * w for j in range(len(rows))], [r["model"] for r in rows])
    ax.set_ylabel("latency / ONNX Runtime (lower is better)")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["mlp", "resnet18", "bert_tiny"],
                    choices=["mlp", "resnet18", "bert_tiny"])
    ap.add_argument("--trials", type=int, default=0, help="tuning budget per model (0: none)")
    ap.add_argument("--time-per-model", type=float, default=2700,
                    help="tuning time limit per model in seconds (default 45 min)")
    ap.add_argument("--per-iter", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--measure-only", action="store_true",
                    help="compile with the databases an earlier run left in --work-dir and "
                         "time them, without tuning (tuning s: the span of their records)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--png", default=None)
    args = ap.parse_args()
    out_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="models-"))
    print(f"CPU: {_common.cpu_name()}; one thread everywhere; torch {torch.__version__}")
    rows = [bench(m, args, out_dir) for m in args.models]
    _common.print_table("whole models, single-threaded (median ms; ratios > 1: looptune faster)",
                        rows, [("model", "model"), ("tasks", "tasks"),
                               ("torch_ms", "torch", "{:.3f}"),
                               ("ort_ms", "ORT", "{:.3f}"), ("untuned_ms", "untuned", "{:.3f}"),
                               ("tuned_ms", "tuned", "{:.3f}"), ("trials", "trials"),
                               ("tuning_s", "tuning s", "{:.0f}"), ("vs_ort", "vs ORT", "{:.2f}"),
                               ("vs_torch", "vs torch", "{:.2f}"),
                               ("untuned_vs_ort", "untuned vs ORT", "{:.2f}")])
    print("targets: tuned >= 1.0x ORT on every model, >= 1.5x torch on the MLP; untuned "
          "within 3x of ORT (untuned vs ORT >= 0.33)")
    if args.png:
        plot(rows, args.png)
        print(f"wrote {args.png}")
    _common.write_json(args.json, {"benchmark": "models", "rows": rows})


if __name__ == "__main__":
    main()
