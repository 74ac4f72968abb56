"""looptune: a search-based auto-tuning compiler for tensor programs."""
from .version import __version__  # noqa: F401

from . import te, tir  # noqa: E402
from .build import build  # noqa: E402
from .schedule import Schedule, ScheduleError, Trace  # noqa: E402
from .target import Target  # noqa: E402

# the model-level API, imported on first use (the importers pull in torch or onnx)
_LAZY = {"from_torch": "frontend", "from_onnx": "frontend", "extract_tasks": "graph",
         "tune_model": "graph", "compile_model": "graph", "load": "graph"}


_SUBMODULES = ("autotvm", "template")  # template-based tuning, imported on first use


def __getattr__(name):
    if name in _SUBMODULES:
        import importlib
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'looptune' has no attribute {name!r}")


__all__ = ["Schedule", "ScheduleError", "Target", "Trace", "build", "te", "tir", "__version__",
           *_LAZY]
