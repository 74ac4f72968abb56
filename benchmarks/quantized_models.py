"""Quantized models as users bring them: zoo models exported to ONNX and quantized with ONNX
Runtime's own tools (the CNNs with `quantize_static`, QDQ, per-channel int8 weights and uint8
activations calibrated on random inputs; the transformers with `quantize_dynamic`), compiled by
looptune untuned (their integer matmuls and convolutions on the CPU's int8 units) and run
beside ONNX Runtime on the same file, float32 and int8, one thread (or --threads).

Each model's int8 output is compared with ONNX Runtime's int8 output (the largest difference
against the output's range); the four runs are timed in alternating rounds
(_common.interleaved_seconds), each call on numpy arrays as a user makes it.

Target (issue 43): int8 untuned >= 1.2x ONNX Runtime int8 (geometric mean; ResNet-50 >= 1.3x,
BERT >= 1.2x).

    python benchmarks/quantized_models.py [--models resnet50 bert] [--threads 1] [--json out.json]
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


CALIBRATION_INPUTS = 4


def quantize(fp32: Path, int8: Path, inputs) -> str:
    """The model quantized as a user of ONNX Runtime does it: an image model (one 4-D float
    input) statically, QDQ per channel, calibrated on random images; others dynamically."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)
    if len(inputs) != 1 or inputs[0].ndim != 4 or not inputs[0].is_floating_point():
        quantize_dynamic(str(fp32), str(int8))
        return "dynamic"
    import onnx
    name = onnx.load(str(fp32), load_external_data=False).graph.input[0].name
    r = np.random.default_rng(0)
    batches = iter([{name: r.standard_normal(tuple(inputs[0].shape)).astype(np.float32)}
                    for _ in range(CALIBRATION_INPUTS)])

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(batches, None)

    quantize_static(str(fp32), str(int8), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    return "static QDQ"


def bench(name: str, work: Path, rounds: int, threads: int) -> dict:
    import onnxruntime as ort
    import torch

    import looptune as lt
    from looptune.testing import zoo
    net, inputs = zoo.build(name)
    fp32, int8 = work / f"{name}.onnx", work / f"{name}_int8.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, tuple(inputs), str(fp32), dynamo=False, opset_version=17)
    how = quantize(fp32, int8, inputs)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    sessions = {p: ort.InferenceSession(str(p), opts, providers=["CPUExecutionProvider"])
                for p in (fp32, int8)}
    feeds = {i.name: t.numpy() for i, t in zip(sessions[int8].get_inputs(), inputs)}
    arrays = [a.astype(np.int32) if a.dtype == np.int64 else a for a in feeds.values()]
    models = {p: lt.compile_model(lt.from_onnx(str(p)), None, "cpu", num_threads=threads)
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
    row = {"model": name, "quantization": how, "threads": threads, "int8_err_vs_ort": err,
           **{f"{k}_ms": v * 1e3 for k, v in secs.items()},
           "int8_vs_ort_int8": secs["ort_int8"] / secs["looptune_int8"],
           "int8_vs_looptune_fp32": secs["looptune_fp32"] / secs["looptune_int8"]}
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=["resnet50", "mobilenet_v2", "bert"])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json")
    args = p.parse_args()
    print(f"CPU: {_common.cpu_name()}")
    rows, failed = [], []
    with tempfile.TemporaryDirectory(prefix="looptune-quantized-") as work:
        for name in args.models:
            try:
                rows.append(bench(name, Path(work), args.rounds, args.threads))
            except Exception as e:  # noqa: BLE001 - reported in the table, the others go on
                print(f"{name}: {type(e).__name__}: {str(e)[:300]}")
                failed.append({"model": name, "error": f"{type(e).__name__}: {e}"[:1000]})
    ratios = [r["int8_vs_ort_int8"] for r in rows] or [float("nan")]
    geomean = float(np.exp(np.mean(np.log(ratios))))
    _common.print_table(f"ONNX Runtime-quantized models, untuned, {args.threads} thread(s)", rows, [
        ("model", "model"), ("quantization", "quantized"), ("ort_fp32_ms", "ORT fp32 ms", "{:.2f}"),
        ("ort_int8_ms", "ORT int8 ms", "{:.2f}"), ("looptune_fp32_ms", "looptune fp32 ms", "{:.2f}"),
        ("looptune_int8_ms", "looptune int8 ms", "{:.2f}"),
        ("int8_vs_ort_int8", "int8 vs ORT int8", "{:.2f}x"),
        ("int8_vs_looptune_fp32", "int8 vs fp32", "{:.2f}x"),
        ("int8_err_vs_ort", "max diff / range", "{:.1e}")])
    print(f"geometric mean, int8 vs ONNX Runtime int8: {geomean:.2f}x")
    _common.write_json(args.json, {"cpu": _common.cpu_name(), "rows": rows,
                                   "geomean_int8_vs_ort_int8": geomean, "failed": failed,
                                   "command": " ".join(sys.argv)})


if __name__ == "__main__":
    main()
