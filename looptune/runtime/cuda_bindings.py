"""cuda-python, imported on first use: moved to looptune.cuda_bindings (below every layer
that needs it); this name keeps working."""
from ..cuda_bindings import INSTALL_HINT, CudaUnavailable, _bindings, _check, _status_text  # noqa: F401

__all__ = ["INSTALL_HINT", "CudaUnavailable"]
