"""The CUDA device this process can use, as Target detection sees it: whether the driver
loads and sees a GPU (`gpu_available`), and the device's name and attributes (`DeviceQuery`).
cuda-python is imported on first use (looptune.cuda_bindings)."""
from __future__ import annotations

from functools import lru_cache

from ..cuda_bindings import CudaUnavailable, _bindings, _check, _status_text


@lru_cache(maxsize=1)
def _driver_state() -> tuple:
    """(driver module, None) once cuInit succeeds and a device exists, else (None, why)."""
    try:
        drv = _bindings("driver")
    except CudaUnavailable as e:
        return None, str(e)
    try:
        status, = drv.cuInit(0)
    except Exception as e:  # noqa: BLE001 - the bindings raise when libcuda.so is missing
        return None, f"the NVIDIA driver (libcuda) cannot be loaded: {e}"
    if int(status) != 0:
        return None, f"cuInit failed: {_status_text(status)}"
    status, n = drv.cuDeviceGetCount()
    if int(status) != 0 or n == 0:
        return None, "the driver sees no CUDA device"
    return drv, None


def gpu_available() -> tuple[bool, str]:
    """(True, "") when a CUDA device can be used here, else (False, why not)."""
    drv, why = _driver_state()
    return drv is not None, why or ""


def _driver():
    drv, why = _driver_state()
    if drv is None:
        raise CudaUnavailable(f"no CUDA GPU can be used here: {why}")
    return drv


class DeviceQuery:
    """What Target detection reads from the driver: `name()`, and `attribute(NAME)`, the
    value of CU_DEVICE_ATTRIBUTE_<NAME>."""

    def __init__(self, device: int = 0):
        self.drv = _driver()
        self.dev = _check(self.drv.cuDeviceGet(device), f"cuDeviceGet({device})",
                          CudaUnavailable)

    def name(self) -> str:
        raw = _check(self.drv.cuDeviceGetName(256, self.dev), "cuDeviceGetName")
        return raw.split(b"\0", 1)[0].decode(errors="replace").strip()

    def attribute(self, name: str) -> int:
        attr = getattr(self.drv.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        return int(_check(self.drv.cuDeviceGetAttribute(attr, self.dev), f"attribute {name}"))
