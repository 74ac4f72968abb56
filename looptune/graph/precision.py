"""Lower precision for a float32 model, chosen by the user and reported, never silent.

`to_bfloat16(graph)`: every matrix product with a constant weight (linear layers, the
attention projections) takes its weight in bfloat16, stored once at compile time as [N][K]
(the layout the CPU's dot-product units read), and its activation cast to bfloat16 just
before it (the cast fuses into the kernel that produces the activation, which then writes
half the bytes); products are summed in float32 and the result stays float32. Everything
else (softmax, normalizations, residual adds, activations) computes in float32. On a target
with AMX-BF16 or AVX512-BF16 the search and the default schedule compute these matmuls with
those units (tune/schedule_rule/multi_level_tiling_intrin.py, dlight/cpu_intrin.py).

`precision="int8"` and `"int8-dynamic"`: constant-weight matmuls (and, statically, convolutions)
computed in int8 on the CPU's u8 x s8 units: graph/quantize.py. "int8" quantizes activations
with per-tensor ranges calibrated on the calibration inputs, which it needs; "int8-dynamic"
quantizes only the linear layers, with each call's own range (a transformer's), and needs none.

`accuracy(reference_outputs, outputs)`: what the lower precision costs on given inputs (the
report every low-precision compile prints): the largest error relative to each output's
range, and for a classifier's (batch, classes) output the share of inputs whose top class is
the same.
"""
from __future__ import annotations

import numpy as np

from .ir import Graph, GraphError, rebuild

PRECISIONS = ("float32", "bf16", "int8", "int8-dynamic")


def to_bfloat16(graph: Graph) -> Graph:
    """The graph with its constant-weight matmuls in bfloat16 (module docstring)."""
    try:
        import ml_dtypes
    except ImportError:
        raise GraphError("precision='bf16' needs the ml_dtypes package (numpy has no "
                         "bfloat16): pip install ml_dtypes") from None
    def rewrite(g, node, get):
        args = [get(v) for v in node.inputs]
        attrs = dict(node.attrs)
        w = args[1] if len(args) > 1 else None
        if not (node.op == "matmul" and w is not None and w.is_const and w.dtype == "float32"
                and w.data.ndim == 2 and args[0].dtype == "float32"
                and not attrs.get("transpose_a")):
            return None
        data = w.data if attrs.get("transpose_b") else w.data.T  # as [N][K]
        weight = g.const(w.name + "_bf16", np.ascontiguousarray(data).astype(ml_dtypes.bfloat16))
        x = g.op("cast", args[0], name=node.name + "_bf16", dtype="bfloat16")
        return g.op("matmul", x, weight, name=node.name, transpose_b=True)
    return rebuild(graph, rewrite)


def lower_precision(graph: Graph, precision: str, *, calibration=None) -> Graph:
    """`graph` in `precision` ("float32": itself; "bf16": to_bfloat16; "int8": quantize_static
    on `calibration`, a list of input tuples; "int8-dynamic": quantize_dynamic)."""
    if precision == "float32":
        return graph
    if precision == "bf16":
        return to_bfloat16(graph)
    if precision == "int8":
        if calibration is None:
            raise GraphError("precision='int8' quantizes activations with ranges calibrated on "
                             "example inputs: give calibration=[(x, ...), ...] (on the command "
                             "line --calibration NPZ), or use precision='int8-dynamic', which "
                             "needs none")
        from .quantize import quantize_static
        return quantize_static(graph, calibration_sets(graph, calibration))
    if precision == "int8-dynamic":
        from .quantize import quantize_dynamic
        return quantize_dynamic(graph)
    raise GraphError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")


def calibration_sets(graph: Graph, calibration) -> list:
    """The calibration inputs as a list of tuples of arrays, checked against the graph's
    inputs: a clear error naming the input that does not fit."""
    if calibration is None:
        return []
    sets = list(calibration)
    if not sets:
        raise GraphError("calibration is empty: give a list of input tuples (one tuple per "
                         "example, one array per model input), or leave it out")
    out = []
    for k, inputs in enumerate(sets):
        inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
        if len(inputs) != len(graph.inputs):
            raise GraphError(f"calibration example {k} has {len(inputs)} arrays; the model "
                             f"takes {len(graph.inputs)} ({', '.join(v.name for v in graph.inputs)})")
        for v, a in zip(graph.inputs, inputs):
            a = np.asarray(a)
            if a.shape != tuple(v.shape):
                raise GraphError(f"calibration example {k}: input {v.name} must have shape "
                                 f"{tuple(v.shape)}, got {a.shape}")
            if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
                raise GraphError(f"calibration example {k}: input {v.name} holds NaN or "
                                 "infinity; calibrate on finite data")
        out.append(inputs)
    return out


def accuracy(reference: list, outputs: list) -> dict:
    """{"max_rel_error": the largest |output - reference| over each output's range, "top1":
    the share of rows whose argmax agrees, for 2-D outputs of a classifier's shape (None
    otherwise)} over lists of outputs (one list per input)."""
    worst, agree, rows = 0.0, 0, 0
    for ref, got in zip(reference, outputs):
        for r, o in zip(ref, got):
            r, o = np.asarray(r, np.float64), np.asarray(o, np.float64)
            scale = float(np.max(np.abs(r))) if r.size else 0.0
            err = float(np.max(np.abs(o - r))) if r.size else 0.0
            worst = max(worst, err / scale if scale > 0 else err)
            if r.ndim == 2 and r.shape[1] > 1:
                agree += int(np.sum(np.argmax(r, axis=1) == np.argmax(o, axis=1)))
                rows += r.shape[0]
    return {"max_rel_error": worst, "top1": agree / rows if rows else None}


def report(precision: str, acc: dict, n_inputs: int) -> str:
    top1 = "" if acc["top1"] is None else f", top-1 agreement {acc['top1']:.1%}"
    return (f"precision {precision}: max error {acc['max_rel_error']:.2e} of each output's "
            f"range against float32 on {n_inputs} input(s){top1}")
