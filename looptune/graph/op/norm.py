"""Reductions and normalizations beyond nn.py's: min and prod (numpy's axis / keepdims),
rms_norm (T5, Llama) and log_softmax."""
from __future__ import annotations

import numpy as np

from ...te import ops
from .base import graph_op
from .nn import _n_inputs, _reduce_op

_reduce_op("min", ops.reduce_min, np.min)
_reduce_op("prod", ops.reduce_prod, np.prod)


def _rms_norm_ref(a, attrs):
    x = a[0].astype(np.float64)
    y = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + attrs.get("eps", 1e-6))
    if len(a) > 1:
        y = y * a[1]
    return y.astype(a[0].dtype)


@graph_op("rms_norm", "reduction", attrs=("eps",), ref=_rms_norm_ref)
def rms_norm(inputs, attrs, node):
    """x / sqrt(mean(x^2) + eps) * gamma over the last axis; gamma (optional) has that axis's
    length. eps defaults to 1e-6 (Llama's; torch.nn.RMSNorm's None means float32's eps)."""
    _n_inputs(node, "rms_norm", inputs, 1, 2)
    gamma = inputs[1] if len(inputs) > 1 else None
    return ops.rms_norm(inputs[0], gamma, eps=float(attrs.get("eps", 1e-6)), name=node)


def _log_softmax_ref(a, attrs):
    x = a[0].astype(np.float64)
    axis = attrs.get("axis", -1)
    s = x - x.max(axis=axis, keepdims=True)
    return (s - np.log(np.exp(s).sum(axis=axis, keepdims=True))).astype(a[0].dtype)


@graph_op("log_softmax", "reduction", attrs=("axis",), ref=_log_softmax_ref)
def log_softmax(inputs, attrs, node):
    """x - max - log(sum(exp(x - max))) along axis (default -1)."""
    _n_inputs(node, "log_softmax", inputs, 1)
    return ops.log_softmax(inputs[0], axis=attrs.get("axis", -1), name=node)
