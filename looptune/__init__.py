"""looptune: a search-based auto-tuning compiler for tensor programs."""
from .version import __version__  # noqa: F401

from . import te, tir  # noqa: E402
from .build import build, lower  # noqa: E402
from .runtime import nd  # noqa: E402
from .runtime.nd import cpu, cuda, device  # noqa: E402
from .schedule import Schedule, ScheduleError, Trace  # noqa: E402
from .target import Target  # noqa: E402
from .tir.func import IRModule  # noqa: E402

# TVM spells it tir.Schedule; the schedule layer sits above tir, so the name is attached
# here, where both are imported
tir.Schedule = Schedule

# the model-level API, imported on first use (the importers pull in torch or onnx)
_LAZY = {"from_torch": "frontend", "from_onnx": "frontend", "extract_tasks": "graph",
         "tune_model": "graph", "compile_model": "graph", "load": "graph"}


# imported on first use: template-based tuning, and TVM's names for the engine
_SUBMODULES = ("auto_scheduler", "autotvm", "meta_schedule", "template", "tune")


def __getattr__(name):
    if name in _SUBMODULES:
        import importlib
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'looptune' has no attribute {name!r}")


__all__ = ["IRModule", "Schedule", "ScheduleError", "Target", "Trace", "build", "cpu", "cuda",
           "device", "lower", "nd", "te", "tir", "__version__", *_LAZY]
