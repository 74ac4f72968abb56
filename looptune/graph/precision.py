"""Lower precision for a float32 model, chosen by the user and reported, never silent.

`to_bfloat16(graph)`: every matrix product with a constant weight (linear layers, the
attention projections) takes its weight in bfloat16, stored once at compile time as [N][K]
(the layout the CPU's dot-product units read), and its activation cast to bfloat16 just
before it (the cast fuses into the kernel that produces the activation, which then writes
half the bytes); products are summed in float32 and the result stays float32. Everything
else (softmax, normalizations, residual adds, activations) computes in float32. On a target
with AMX-BF16 or AVX512-BF16 the search and the default schedule compute these matmuls with
those units (tune/schedule_rule/multi_level_tiling_intrin.py, dlight/cpu_intrin.py).

`accuracy(reference_outputs, outputs)`: what the lower precision costs on given inputs (the
report every low-precision compile prints): the largest error relative to each output's
range, and for a classifier's (batch, classes) output the share of inputs whose top class is
the same.
"""
from __future__ import annotations

import numpy as np

from .ir import Graph, GraphError, rebuild

PRECISIONS = ("float32", "bf16")


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


def lower_precision(graph: Graph, precision: str) -> Graph:
    """`graph` in `precision` ("float32": itself; "bf16": to_bfloat16)."""
    if precision == "float32":
        return graph
    if precision == "bf16":
        return to_bfloat16(graph)
    raise GraphError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")


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
