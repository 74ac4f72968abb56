"""Target: what the code is compiled for - kind, ISA features, cores, caches - and detection
of the host from /proc/cpuinfo and /sys."""
from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

_VECTOR_FEATURES = (("avx512f", 512), ("avx2", 256), ("avx", 256), ("sse2", 128), ("neon", 128),
                    ("asimd", 128))
_KEY_FEATURES = ("avx512f", "avx2", "fma", "avx", "sse4_2", "neon", "asimd")


class TargetError(ValueError):
    """An unknown or malformed target description."""


@dataclass(frozen=True)
class Target:
    kind: str = "cpu"              # "cpu" or "cuda"
    model: str = ""                # CPU model name or GPU name
    arch: str = ""                 # "x86_64", "aarch64", or "sm_90" for GPUs
    features: tuple = ()           # ISA features, e.g. ("avx2", "fma")
    cores: int = 1
    vector_bits: int = 128
    l1d_bytes: int = 32 * 1024
    l2_bytes: int = 512 * 1024
    l3_bytes: int = 8 * 1024 * 1024
    extra: tuple = field(default=())  # (key, value) pairs, e.g. max threads per GPU block

    @staticmethod
    def create(spec="cpu") -> "Target":
        """A Target from a Target, "cpu"/"llvm"/"host" (this machine), "cuda", or a dict."""
        if isinstance(spec, Target):
            return spec
        if isinstance(spec, dict):
            return Target.from_json(spec)
        if isinstance(spec, str):
            s = spec.strip().lower()
            if s in ("cpu", "llvm", "host", "c"):
                return host()
            if s in ("cuda", "gpu", "nvidia"):
                return cuda_target()
            if s.startswith("{"):
                try:
                    d = json.loads(spec)
                except ValueError as e:
                    raise TargetError(f"target {spec!r} is not valid JSON ({e}); write it as "
                                      "Target.to_json() does, or use 'cpu'") from None
                return Target.from_json(d)
        raise TargetError(f"unknown target {spec!r}; use 'cpu' (this machine), 'cuda', or a "
                          "Target")

    @property
    def vector_lanes_f32(self) -> int:
        return max(1, self.vector_bits // 32)

    def has(self, feature: str) -> bool:
        return feature in self.features

    def key(self) -> str:
        """What tuning results depend on: kind, architecture and the vector ISA."""
        feats = "+".join(f for f in _KEY_FEATURES if f in self.features)
        return f"{self.kind}:{self.arch}:{feats}:{self.cores}c"

    def __str__(self):
        feats = "+".join(f for f in _KEY_FEATURES if f in self.features) or "scalar"
        return f"{self.kind}({self.model or self.arch}, {feats}, {self.cores} cores)"

    def to_json(self) -> dict:
        d = asdict(self)
        d["features"] = list(self.features)
        d["extra"] = [list(x) for x in self.extra]
        return d

    @staticmethod
    def from_json(d: dict) -> "Target":
        if not isinstance(d, dict):
            raise TargetError(f"a target description must be a JSON object, got {d!r}")
        d = dict(d)
        unknown = set(d) - set(Target.__dataclass_fields__)
        if unknown:
            raise TargetError(f"unknown Target fields {sorted(unknown)}; the fields are "
                              f"{', '.join(Target.__dataclass_fields__)}")
        d["features"] = tuple(d.get("features", ()))
        d["extra"] = tuple(tuple(x) for x in d.get("extra", ()))
        return Target(**d)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _size(text: str) -> int:
    text = text.strip().upper()
    mult = 1
    if text.endswith("K"):
        mult, text = 1024, text[:-1]
    elif text.endswith("M"):
        mult, text = 1024 * 1024, text[:-1]
    try:
        return int(text) * mult
    except ValueError:
        return 0


@lru_cache(maxsize=1)
def host() -> Target:
    """This machine, read from /proc/cpuinfo and /sys (with portable fallbacks)."""
    info = _read("/proc/cpuinfo")
    flags, model = set(), platform.processor()
    for line in info.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("flags", "Features") and not flags:
            flags = set(value.split())
        elif key == "model name" and value.strip():
            model = value.strip()
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    vector_bits = next((b for f, b in _VECTOR_FEATURES if f in flags), 128)
    caches = {}
    for idx in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        level = _read(str(idx / "level")).strip()
        ctype = _read(str(idx / "type")).strip()
        size = _size(_read(str(idx / "size")))
        if ctype in ("Data", "Unified") and level:
            caches.setdefault(int(level), size)
    default = Target()
    return Target(kind="cpu", model=model, arch=platform.machine(),
                  features=tuple(sorted(flags)), cores=cores, vector_bits=vector_bits,
                  l1d_bytes=caches.get(1, default.l1d_bytes),
                  l2_bytes=caches.get(2, default.l2_bytes),
                  l3_bytes=caches.get(3, default.l3_bytes))


def cuda_target(arch: str = "sm_90", model: str = "") -> Target:
    return Target(kind="cuda", model=model, arch=arch, cores=132, vector_bits=128,
                  extra=(("max_threads_per_block", 1024), ("shared_memory_bytes", 49152)))
