"""Importers into the graph IR: PyTorch (through torch.export) and ONNX. Each needs its
framework, an optional extra: pip install 'looptune[torch]' or 'looptune[onnx]'."""
from __future__ import annotations


def from_torch(model, example_inputs=None, **kwargs):
    from .torch import from_torch as f
    return f(model, example_inputs, **kwargs)


def from_onnx(model, **kwargs):
    from .onnx import from_onnx as f
    return f(model, **kwargs)


__all__ = ["from_onnx", "from_torch"]
