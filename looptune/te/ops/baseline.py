"""Library baselines for the built-in operators: what a user would call instead of a tuned
kernel, in the kernel's own dtype (float32) - numpy (OpenBLAS) for linear algebra and
elementwise work, torch for convolutions and pooling when it is installed. The numpy
references in reference.py accumulate in float64: right for checking, wrong for timing."""
from __future__ import annotations

import numpy as np


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def baseline(name: str, arrays: list, params: dict, *, threads: int = 1):
    """(label, fn) where fn() computes operator `name` on the input `arrays` with a library and
    returns the result, or None when there is no library version of it here."""
    p = params
    torch = _torch()
    if torch is not None:
        torch.set_num_threads(threads)
    if name == "matmul":
        a, b = arrays
        out = np.empty((a.shape[0], b.shape[1]), a.dtype)
        return "numpy", lambda: np.matmul(a, b, out=out)
    if name == "matmul_add":
        a, b, c = arrays
        out = np.empty_like(c)
        return "numpy", lambda: np.add(np.matmul(a, b, out=out), c, out=out)
    if name == "batch_matmul":
        a, b = arrays
        out = np.empty((a.shape[0], a.shape[1], b.shape[2]), a.dtype)
        return "numpy", lambda: np.matmul(a, b, out=out)
    if name == "dense":
        x, w, bias = arrays
        out = np.empty((x.shape[0], w.shape[1]), x.dtype)

        def dense():
            np.matmul(x, w, out=out)
            np.add(out, bias, out=out)
            return np.maximum(out, 0, out=out)
        return "numpy", dense
    if name in ("conv2d", "depthwise_conv2d", "max_pool2d", "avg_pool2d") and torch is not None:
        return "torch", _torch_nn(torch, name, arrays, p)
    if name == "softmax":
        (x,) = arrays

        def softmax():
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)
        return "numpy", softmax
    if name == "relu":
        (x,) = arrays
        out = np.empty_like(x)
        return "numpy", lambda: np.maximum(x, 0, out=out)
    if name == "add":
        a, b = arrays
        out = np.empty_like(a)
        return "numpy", lambda: np.add(a, b, out=out)
    if name == "reduce_sum":
        (x,) = arrays
        return "numpy", lambda: x.sum(axis=-1)
    return None


def _torch_nn(torch, name, arrays, p):
    import torch.nn.functional as F
    t = [torch.from_numpy(a) for a in arrays]
    if name == "conv2d":
        x, w = t
        return lambda: F.conv2d(x, w, stride=p["stride"], padding=p["pad"],
                                dilation=p["dilation"])
    if name == "depthwise_conv2d":
        x, w = t
        return lambda: F.conv2d(x, w, stride=p["stride"], padding=p["pad"], groups=x.shape[1])
    (x,) = t
    if name == "max_pool2d":
        return lambda: F.max_pool2d(x, p["kernel"], p["stride"], p["pad"])
    return lambda: F.avg_pool2d(x, p["kernel"], p["stride"], p["pad"], count_include_pad=True)
