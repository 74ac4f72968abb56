"""TVM's array and device names over numpy: `nd.array(a, device=cpu())` is an aligned copy
that kernels take as any numpy array, with TVM's `.numpy()`; `nd.empty(shape, dtype)`."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .error import RunError
from .ndarray import aligned
from .ndarray import empty as _empty


@dataclass(frozen=True)
class Device:
    """Where arrays live. Kernels of a CPU target take host arrays; a CudaModule takes numpy
    arrays and copies them itself, so arrays are always host arrays here."""

    device_type: str = "cpu"
    device_id: int = 0

    def __str__(self):
        return f"{self.device_type}({self.device_id})"


def cpu(dev_id: int = 0) -> Device:
    return Device("cpu", dev_id)


def cuda(dev_id: int = 0) -> Device:
    return Device("cuda", dev_id)


def device(dev_type: str = "cpu", dev_id: int = 0) -> Device:
    if dev_type not in ("cpu", "llvm", "cuda", "gpu"):
        raise RunError(f"unknown device {dev_type!r}; use 'cpu' or 'cuda'")
    return Device("cuda" if dev_type in ("cuda", "gpu") else "cpu", dev_id)


class NDArray(np.ndarray):
    """A numpy array (64-byte aligned) with TVM's methods; kernels take it as it is."""

    device = cpu()

    def numpy(self) -> np.ndarray:
        """A plain numpy copy."""
        return np.array(self, copy=True).view(np.ndarray)

    def asnumpy(self) -> np.ndarray:
        return self.numpy()

    def copyfrom(self, source) -> "NDArray":
        self[...] = np.asarray(source)
        return self


def _wrap(a: np.ndarray, dev) -> NDArray:
    if dev is not None and not isinstance(dev, Device):
        raise RunError(f"device must be looptune.cpu() or looptune.cuda(), got {dev!r}")
    out = a.view(NDArray)
    if dev is not None:
        out.device = dev
    return out


def array(source, device: Device | None = None) -> NDArray:
    """An aligned copy of `source` (any array-like; its dtype is kept)."""
    a = np.asarray(source)
    return _wrap(aligned(np.array(a, copy=True, order="C")), device)


def empty(shape, dtype="float32", device: Device | None = None) -> NDArray:
    """An uninitialized aligned array."""
    return _wrap(_empty(tuple(shape), dtype), device)
