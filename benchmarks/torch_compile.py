"""torch.compile(model, backend="looptune") against eager PyTorch, untuned (default
schedules), one thread: the zoo's CNNs and a transformer, checked against eager first.

    python benchmarks/torch_compile.py [--models resnet50 mobilenet_v2 bert_tiny] [--json out]

For each model: eager and compiled latency (median of repeats, torch tensors in and out, the
way a torch.compile user calls the model), the ratio, the compile time (first call) and the
largest difference from eager.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402  (single-threaded BLAS before numpy loads)

import torch  # noqa: E402

from looptune.testing import zoo  # noqa: E402

DEFAULT = ["resnet50", "mobilenet_v2", "squeezenet1_1", "bert_tiny"]


def bench(name: str) -> dict:
    model, inputs = zoo.build(name)
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    torch._dynamo.reset()
    fast = torch.compile(model, backend="looptune", options={"num_threads": 1})
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        want = model(*inputs)
        t0 = time.perf_counter()
        got = fast(*inputs)
        compile_s = time.perf_counter() - t0
        flat = lambda x: x if isinstance(x, torch.Tensor) else x[0]  # noqa: E731
        if not isinstance(want, torch.Tensor) and hasattr(want, "last_hidden_state"):
            want, got = want.last_hidden_state, got.last_hidden_state
        err = float((flat(got) - flat(want)).abs().max())
        scale = float(flat(want).abs().max())
        eager = _common.median_seconds(lambda: model(*inputs), repeat=11, min_time=0.2)
        ours = _common.median_seconds(lambda: fast(*inputs), repeat=11, min_time=0.2)
    left = sorted({str(w.message) for w in caught if "looptune" in str(w.message)})
    row = {"model": name, "eager_ms": eager * 1e3, "looptune_ms": ours * 1e3,
           "vs_eager": eager / ours, "compile_s": compile_s, "max_abs_err": err,
           "max_abs_out": scale, "left_in_pytorch": left}
    print(f"  {name}: eager {eager * 1e3:.3f} ms, looptune {ours * 1e3:.3f} ms -> "
          f"{eager / ours:.2f}x (compile {compile_s:.1f} s, max |diff| {err:.2e} of "
          f"{scale:.2e}){'; in PyTorch: ' + '; '.join(left) if left else ''}", flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=DEFAULT, choices=zoo.names())
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"CPU: {_common.cpu_name()}; one thread (torch and looptune); untuned (default "
          "schedules)")
    rows = [bench(n) for n in args.models]
    print(f"\n{'model':<16} {'eager ms':>10} {'looptune ms':>12} {'vs eager':>9} "
          f"{'compile s':>10}")
    for r in rows:
        print(f"{r['model']:<16} {r['eager_ms']:>10.3f} {r['looptune_ms']:>12.3f} "
              f"{r['vs_eager']:>8.2f}x {r['compile_s']:>10.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": _common.cpu_name(), "rows": rows},
                                              indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
