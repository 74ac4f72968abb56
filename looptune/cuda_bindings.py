"""NVIDIA's cuda-python, imported on first use: its driver and NVRTC modules, and its
(status, *values) answers turned into values or errors that name the call."""
from __future__ import annotations

import importlib

from .error import BuildError, RunError

INSTALL_HINT = ("pip install 'looptune[cuda]' (cuda-python, NVRTC and ml_dtypes), with an "
                "NVIDIA driver for the GPU")


class CudaUnavailable(BuildError):
    """cuda-python, the driver or a GPU is missing."""


# ---------------------------------------------------------------------------- cuda-python
def _bindings(which: str):
    """cuda-python's `driver` or `nvrtc` module (cuda.bindings from 12.6 on, cuda.* before)."""
    try:
        return importlib.import_module(f"cuda.bindings.{which}")
    except ImportError:
        pass
    try:
        return importlib.import_module({"driver": "cuda.cuda", "nvrtc": "cuda.nvrtc"}[which])
    except ImportError:
        raise CudaUnavailable(f"cuda-python is not installed (no cuda.bindings.{which}); "
                              f"{INSTALL_HINT}") from None


def _check(result, what: str, error=RunError):
    """cuda-python answers (status, *values): the values, or `error` naming the call."""
    if not isinstance(result, tuple):
        result = (result,)
    status, rest = result[0], result[1:]
    if int(status) != 0:
        raise error(f"{what} failed: {_status_text(status)}")
    return rest[0] if len(rest) == 1 else rest


def _status_text(status) -> str:
    name = getattr(status, "name", str(status))
    try:
        if name.startswith("NVRTC"):
            return name
        drv = _bindings("driver")
        _, text = drv.cuGetErrorString(status)
        return f"{name} ({text.decode() if isinstance(text, bytes) else text})"
    except Exception:  # noqa: BLE001 - only the message suffers
        return name
