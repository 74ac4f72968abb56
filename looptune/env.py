"""Every environment variable looptune reads, in one place. They are for debugging and
machine set-up only; everything else is an explicit argument."""
from __future__ import annotations

import os
from pathlib import Path

# CC: the C compiler (default: cc). LOOPTUNE_CACHE_DIR: where compiled kernels are cached
# (default: ~/.cache/looptune). LOOPTUNE_CFLAGS: extra flags appended to every compile.
# LOOPTUNE_HOST_ISA: "avx2" makes an AVX-512 machine pass for an AVX2 one (its features
# without AVX-512 and AMX, 256-bit vectors, 16 registers): every Target("cpu"), build, record
# and check is then what an AVX2 machine gets, apart from caches and clock.
# LOOPTUNE_WORKERS: how many worker processes the tuner starts for its own Python work
# (replaying the search's candidates, rendering C); 0 or 1: none, all in its own process.


def cc() -> str:
    return os.environ.get("CC", "cc")


def cache_dir() -> Path:
    d = os.environ.get("LOOPTUNE_CACHE_DIR")
    p = Path(d) if d else Path.home() / ".cache" / "looptune"
    p.mkdir(parents=True, exist_ok=True)
    return p


def extra_cflags() -> list[str]:
    return os.environ.get("LOOPTUNE_CFLAGS", "").split()


def host_isa() -> str:
    """LOOPTUNE_HOST_ISA: "" (this machine as it is) or "avx2"."""
    return os.environ.get("LOOPTUNE_HOST_ISA", "").strip().lower()


def tuner_workers() -> int | None:
    """LOOPTUNE_WORKERS as a count (None: unset)."""
    v = os.environ.get("LOOPTUNE_WORKERS", "").strip()
    if not v:
        return None
    if not v.isdigit():
        raise ValueError(f"LOOPTUNE_WORKERS={v!r}: give a whole number of worker processes "
                         "(0: none; unset: one per CPU, up to 8)")
    return int(v)
