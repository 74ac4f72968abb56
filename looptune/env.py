"""Every environment variable looptune reads, in one place. They are for debugging and
machine set-up only; everything else is an explicit argument."""
from __future__ import annotations

import os
from pathlib import Path

# CC: the C compiler (default: cc). LOOPTUNE_CACHE_DIR: where compiled kernels are cached
# (default: ~/.cache/looptune). LOOPTUNE_CFLAGS: extra flags appended to every compile.


def cc() -> str:
    return os.environ.get("CC", "cc")


def cache_dir() -> Path:
    d = os.environ.get("LOOPTUNE_CACHE_DIR")
    p = Path(d) if d else Path.home() / ".cache" / "looptune"
    p.mkdir(parents=True, exist_ok=True)
    return p


def extra_cflags() -> list[str]:
    return os.environ.get("LOOPTUNE_CFLAGS", "").split()
