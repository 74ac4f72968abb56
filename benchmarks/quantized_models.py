"""Quantized models as users bring them: zoo transformers exported to ONNX and quantized with
ONNX Runtime's `quantize_dynamic`, compiled by looptune untuned (their integer matmuls on the
CPU's int8 units) and run beside ONNX Runtime on the same file, float32 and int8, one thread.

Each model's int8 output is compared with ONNX Runtime's int8 output (the largest difference
against the output's range); the four runs are timed in alternating rounds
(_common.interleaved_seconds), each call on numpy arrays as a user makes it.

Target (issue 43): int8 untuned >= 1.2x ONNX Runtime int8 (BERT).

    python benchmarks/quantized_models.py [--models bert bert_tiny] [--json out.json]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: E402  (single-threaded BLAS before numpy loads)

import numpy as np  # noqa: E402


def bench(name: str, work: Path, rounds: int) -> dict:
    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import quantize_dynamic

    import looptune as lt
    from looptune.testing import zoo
    net, inputs = zoo.build(name)
    fp32, int8 = work / f"{name}.onnx", work / f"{name}_int8.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, tuple(inputs), str(fp32), dynamo=False, opset_version=17)
    quantize_dynamic(str(fp32), str(int8))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    sessions = {p: ort.InferenceSession(str(p), opts, providers=["CPUExecutionProvider"])
                for p in (fp32, int8)}
    feeds = {i.name: t.numpy() for i, t in zip(sessions[int8].get_inputs(), inputs)}
    arrays = [a.astype(np.int32) if a.dtype == np.int64 else a for a in feeds.values()]
    models = {p: lt.compile_model(lt.from_onnx(str(p)), None, "cpu", num_threads=1)
              for p in (fp32, int8)}
    want = sessions[int8].run(None, feeds)[0]
    got = models[int8](*arrays)
    got = np.asarray(got[0] if isinstance(got, (list, tuple)) else got).reshape(want.shape)
    err = float(np.abs(got - want).max() / max(np.ptp(want), 1e-30))
    fns = {"ort_fp32": lambda: sessions[fp32].run(None, feeds),
           "ort_int8": lambda: sessions[int8].run(None, feeds),
           "looptune_fp32": lambda: models[fp32](*arrays),
           "looptune_int8": lambda: models[int8](*arrays)}
    secs = _common.interleaved_seconds(fns, rounds=rounds)
    row = {"model": name, "int8_err_vs_ort": err, **{f"{k}_ms": v * 1e3 for k, v in secs.items()},
           "int8_vs_ort_int8": secs["ort_int8"] / secs["looptune_int8"],
           "int8_vs_looptune_fp32": secs["looptune_fp32"] / secs["looptune_int8"]}
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=["bert", "bert_tiny"])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--json")
    args = p.parse_args()
    print(f"CPU: {_common.cpu_name()}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="looptune-quantized-") as work:
        for name in args.models:
            rows.append(bench(name, Path(work), args.rounds))
    _common.print_table("quantize_dynamic models, untuned, one thread", rows, [
        ("model", "model"), ("ort_fp32_ms", "ORT fp32 ms", "{:.2f}"),
        ("ort_int8_ms", "ORT int8 ms", "{:.2f}"), ("looptune_fp32_ms", "looptune fp32 ms", "{:.2f}"),
        ("looptune_int8_ms", "looptune int8 ms", "{:.2f}"),
        ("int8_vs_ort_int8", "int8 vs ORT int8", "{:.2f}x"),
        ("int8_vs_looptune_fp32", "int8 vs fp32", "{:.2f}x"),
        ("int8_err_vs_ort", "max diff / range", "{:.1e}")])
    _common.write_json(args.json, {"cpu": _common.cpu_name(), "rows": rows,
                                   "command": " ".join(sys.argv)})


if __name__ == "__main__":
    main()
