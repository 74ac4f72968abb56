"""attention: torch.nn.functional.scaled_dot_product_attention.

    out = softmax(q @ k^T * scale + mask [+ causal]) @ v

q is (..., Lq, D), k (..., Lk, D), v (..., Lk, Dv) with the same leading (batch, head) dims;
the optional 4th input is an additive float mask broadcastable to (..., Lq, Lk); causal=True
adds -inf above the diagonal (j > i, top-left aligned, as torch's is_causal). scale defaults
to 1 / sqrt(D). A row whose every score is -inf gives NaN, as torch's.

Compiling a graph lowers it first (graph.simplify.lower_attention) to two batch matmuls
around a softmax, which the matmul and softmax kernels compute well; its own tensor
expression (the same stages in one function) is what an unprepared graph's kernel runs.
"""
from __future__ import annotations

import math

import numpy as np

from ... import te
from ...te import ops
from ...te.ops.elementwise import _read
from ..ir import GraphError
from .base import graph_op


def shapes(node, types) -> tuple:
    """(batch dims, Lq, Lk, D, Dv) after checking the inputs' shapes (`types` have .shape
    and .dtype: graph values or te tensors)."""
    if len(types) not in (3, 4):
        raise GraphError(f"node {node} (attention): takes q, k, v and an optional mask, got "
                         f"{len(types)} inputs")
    q, k, v = types[:3]
    qs, ks, vs = tuple(q.shape), tuple(k.shape), tuple(v.shape)
    if len(qs) < 3 or not (len(qs) == len(ks) == len(vs)) or not (qs[:-2] == ks[:-2] == vs[:-2]) \
            or qs[-1] != ks[-1] or ks[-2] != vs[-2]:
        raise GraphError(f"node {node} (attention): q (..., Lq, D), k (..., Lk, D) and v "
                         f"(..., Lk, Dv) must share their leading dims, D and Lk; got {qs}, "
                         f"{ks}, {vs}")
    if any(not str(t.dtype).startswith("float") for t in types):
        raise GraphError(f"node {node} (attention): q, k, v and the mask must be float tensors "
                         "(an additive mask: 0 to attend, -inf not to)")
    if len(types) == 4:
        ms, full = tuple(types[3].shape), qs[:-1] + (ks[-2],)
        if len(ms) > len(full) or any(m not in (1, f) for m, f in zip(ms[::-1], full[::-1])):
            raise GraphError(f"node {node} (attention): the mask {ms} does not broadcast to the "
                             f"scores' shape {full}")
    return qs[:-2], qs[-2], ks[-2], qs[-1], vs[-1]


def scale_of(attrs, d: int) -> float:
    s = attrs.get("scale")
    return 1.0 / math.sqrt(d) if s is None else float(s)


def causal_mask(lq: int, lk: int) -> np.ndarray:
    """0 where query i may attend key j (j <= i), -inf above the diagonal."""
    return np.where(np.tri(lq, lk, dtype=bool), 0.0, -np.inf).astype("float32")


def _attention_ref(a, attrs):
    q, k, v = (x.astype(np.float64) for x in a[:3])
    s = q @ np.swapaxes(k, -1, -2) * scale_of(attrs, q.shape[-1])
    if len(a) > 3:
        s = s + a[3]
    if attrs.get("causal"):
        s = s + causal_mask(q.shape[-2], k.shape[-2])
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True) @ v).astype(a[0].dtype)


@graph_op("attention", "anchor", attrs=("scale", "causal"), ref=_attention_ref)
def attention(inputs, attrs, node):
    """The scores, their softmax and the weighted sum of v, as stages of one function."""
    batch, lq, lk, d, dv = shapes(node, inputs)
    Q, K, V = inputs[:3]
    mask = inputs[3] if len(inputs) > 3 else None
    scale, causal = scale_of(attrs, d), bool(attrs.get("causal", False))
    nb = len(batch)
    kd = te.reduce_axis(d, "d")
    scores = te.compute(batch + (lq, lk),
                        lambda *i: te.sum(Q[i[:nb] + (i[nb], kd)] * K[i[:nb] + (i[nb + 1], kd)],
                                          axis=kd),
                        name=node + "_qk", tag="batch_matmul")
    full = batch + (lq, lk)

    def logits(*i):
        s = scores[i] * scale
        if mask is not None:
            s = s + _read(mask, full, i)
        if causal:
            s = te.if_then_else(i[nb + 1] > i[nb], te.const(-math.inf, s.dtype), s)
        return s

    probs = ops.softmax(te.compute(full, logits, name=node + "_logits", tag="elemwise"),
                        axis=-1, name=node + "_softmax")
    kj = te.reduce_axis(lk, "j")
    return te.compute(batch + (lq, dv),
                      lambda *i: te.sum(probs[i[:nb] + (i[nb], kj)] * V[i[:nb] + (kj, i[nb + 1])],
                                        axis=kj),
                      name=node, tag="batch_matmul")
