"""looptune: a search-based auto-tuning compiler for tensor programs."""
__version__ = "0.1.0"

from . import te, tir  # noqa: E402
from .build import build  # noqa: E402
from .schedule import Schedule, ScheduleError, Trace  # noqa: E402
from .target import Target  # noqa: E402

__all__ = ["Schedule", "ScheduleError", "Target", "Trace", "build", "te", "tir", "__version__"]
