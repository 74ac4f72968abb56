"""Target: what the code is compiled for - kind, ISA features, cores, caches, GPU limits - and
detection of the host (from /proc/cpuinfo and /sys) and of a CUDA GPU (through the driver)."""
from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path

from .. import env

_VECTOR_FEATURES = (("avx512f", 512), ("avx2", 256), ("avx", 256), ("sse2", 128), ("neon", 128),
                    ("asimd", 128))
_KEY_FEATURES = ("avx512f", "avx2", "fma", "avx", "sse4_2", "neon", "asimd")

# The instruction-set extensions compiled code may use (names as /proc/cpuinfo spells them):
# what an artifact's ISA fingerprint lists and a machine must have to run it. Other flags of
# /proc/cpuinfo (hypervisor, constant_tsc, ...) say nothing about the code.
ISA_FEATURES = frozenset("""
    sse sse2 pni ssse3 sse4_1 sse4_2 popcnt aes pclmulqdq movbe abm bmi1 bmi2 adx f16c fma
    avx avx2 avx_vnni avx512f avx512cd avx512bw avx512dq avx512vl avx512ifma avx512vbmi
    avx512_vbmi2 avx512_vnni avx512_bitalg avx512_vpopcntdq avx512_bf16 avx512_fp16 gfni vaes
    vpclmulqdq sha_ni amx_tile amx_bf16 amx_int8
    fp asimd asimdhp asimddp asimdfhm sve sve2 i8mm bf16 neon
""".split())


class TargetError(ValueError):
    """An unknown or malformed target description."""


@dataclass(frozen=True)
class Target:
    """What code is compiled and tuned for: the one source of ISA facts (vector width, features,
    cores, cache sizes, GPU limits). `Target.create("cpu")` detects this machine; it round-trips
    through JSON."""

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

    def __post_init__(self):
        """`Target("llvm -mcpu=core-avx2")`, as TVM spells it: a target string alone is
        parsed (Target.create); fields given by name build a Target as they are."""
        if not (isinstance(self.kind, str) and _is_spec(self.kind)):
            return
        if all(getattr(self, f.name) == f.default for f in fields(self) if f.name != "kind"):
            parsed = Target.create(self.kind)
            for name in self.__dataclass_fields__:
                object.__setattr__(self, name, getattr(parsed, name))

    @staticmethod
    def create(spec="cpu") -> "Target":
        """A Target from a Target, "cpu"/"llvm"/"host" (this machine), "cuda", a dict, or a
        TVM target string: "llvm -mcpu=skylake-avx512" is that CPU's ISA (its vector width
        and extensions) with this machine's cores and caches, "llvm -mattr=+avx2,+fma" adds
        extensions to x86-64, "-num-cores=4" sets the cores, "cuda -arch=sm_80" is that GPU
        architecture. A target for an ISA this machine lacks builds code (generate_source)
        but is refused where code must run here: loading a module, tuning."""
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
            if _is_spec(s):
                from .parse import parse_target
                return parse_target(s)
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

    @property
    def vector_registers(self) -> int:
        """SIMD registers the code can keep values in: 32 with AVX-512 (zmm0-31) and on
        AArch64 (v0-31), else 16 (xmm/ymm0-15)."""
        return 32 if self.vector_bits >= 512 or self.arch in ("aarch64", "arm64") else 16

    def has(self, feature: str) -> bool:
        return feature in self.features

    def tensor_intrins(self) -> list:
        """The names of the tensor intrinsics (tir.intrin) whose units this target has; code
        for it uses no other."""
        if self.kind != "cpu":
            return []
        from ..tir.intrin import get_intrin, intrin_names
        return [n for n in intrin_names() if get_intrin(n).offered_by(self)]

    # ISA facts: what code built for this target needs from the machine that runs it
    def isa_features(self) -> tuple:
        """The instruction-set extensions of this target (ISA_FEATURES), sorted."""
        return _isa_features(self.features)

    def isa_fingerprint(self) -> str:
        """A stable name of the ISA code for this target is built for: kind, architecture and
        ISA extensions. Compile caches key on it; artifacts carry it."""
        return f"{self.kind}:{self.arch}:{'+'.join(self.isa_features())}"

    def isa(self) -> dict:
        """The ISA as an artifact records it (JSON-ready)."""
        return {"kind": self.kind, "arch": self.arch, "features": list(self.isa_features()),
                "fingerprint": self.isa_fingerprint()}

    def same_isa(self, other: "Target") -> bool:
        return self.isa_fingerprint() == other.isa_fingerprint()

    def lacks(self, isa: dict) -> list:
        """What of an artifact's ISA (`Target.isa()` of what it was built for) this target
        does not have: its architecture if that differs, else the missing extensions."""
        arch = isa.get("arch")
        if arch and self.arch and arch != self.arch:
            return [f"the {arch} architecture"]
        return sorted(set(isa.get("features", ())) - set(self.features))

    # GPU limits (Target.extra; a target without them gets the usual values)
    def limit(self, key: str, default=None):
        return dict(self.extra).get(key, default)

    @property
    def max_threads_per_block(self) -> int:
        return int(self.limit("max_threads_per_block", 1024))

    @property
    def max_shared_memory_per_block(self) -> int:
        """Bytes of shared memory a block gets without opting in (static __shared__)."""
        return int(self.limit("shared_memory_bytes", 49152))

    @property
    def max_shared_memory_per_block_optin(self) -> int:
        """The most a block can have, opting in (dynamic shared memory)."""
        return int(self.limit("max_shared_memory_per_block_optin",
                              self.max_shared_memory_per_block))

    @property
    def max_registers_per_block(self) -> int:
        return int(self.limit("max_registers_per_block", 65536))

    @property
    def warp_size(self) -> int:
        return int(self.limit("warp_size", 32))

    @property
    def compute_capability(self) -> tuple:
        """(major, minor) of a GPU target's arch ("sm_90" -> (9, 0))."""
        digits = self.arch.removeprefix("sm_").rstrip("af")
        if self.kind != "cuda" or not digits.isdigit():
            raise TargetError(f"{self} has no compute capability (not a CUDA target)")
        return int(digits[:-1]), int(digits[-1])

    def key(self) -> str:
        """What tuning results depend on: kind, architecture and the vector ISA."""
        feats = "+".join(f for f in _KEY_FEATURES if f in self.features)
        return f"{self.kind}:{self.arch}:{feats}:{self.cores}c"

    def __str__(self):
        if self.kind == "cuda":
            model = f"{self.model}, " if self.model else ""
            return f"cuda({model}{self.arch}, {self.cores} SMs)"
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


def _is_spec(text: str) -> bool:
    """Is `text` a TVM target string ("llvm", "llvm -mcpu=...", "cuda -arch=...") rather than
    a kind ("cpu", "cuda")?"""
    words = text.strip().lower().split()
    return bool(words) and (words[0] in ("llvm", "c", "host") or len(words) > 1 and
                            words[0] in ("cpu", "cuda", "nvptx"))


def vector_bits_of(features) -> int:
    """The widest vector registers the ISA extensions give (128 without any)."""
    return next((b for f, b in _VECTOR_FEATURES if f in features), 128)


@lru_cache(maxsize=64)
def _isa_features(features: tuple) -> tuple:
    return tuple(sorted(f for f in features if f in ISA_FEATURES))


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


# The ISAs a machine can be narrowed to (LOOPTUNE_HOST_ISA, `narrowed`): name -> (the
# extensions it needs, those it drops by prefix, its vector width)
NARROW_ISAS = {"avx2": (("avx2", "fma"), ("avx512", "amx", "avx_vnni"), 256)}


def narrowed(target: Target, isa: str) -> Target:
    """`target` passing for a machine of the narrower `isa` (NARROW_ISAS): its extensions
    above that ISA dropped, its vectors that wide; cores, caches and model stay its own."""
    if isa not in NARROW_ISAS:
        raise TargetError(f"{isa!r} is not an ISA looptune can narrow a machine to; use one of "
                          f"{sorted(NARROW_ISAS)}")
    needs, drop, bits = NARROW_ISAS[isa]
    missing = [f for f in needs if not target.has(f)]
    if missing:
        raise TargetError(f"{isa!r}: {target.model or target.arch} lacks {', '.join(missing)}, "
                          f"so it cannot pass for an {isa} machine")
    return replace(target, features=tuple(f for f in target.features if not f.startswith(drop)),
                   vector_bits=min(bits, target.vector_bits))


@lru_cache(maxsize=1)
def host() -> Target:
    """This machine: `detected()`, narrowed by LOOPTUNE_HOST_ISA where it is set ("avx2": an
    AVX-512 machine passing for an AVX2 one, to run what an AVX2 machine runs)."""
    name = env.host_isa()
    if name in ("", "native"):
        return detected()
    try:
        return narrowed(detected(), name)
    except TargetError as e:
        raise TargetError(f"LOOPTUNE_HOST_ISA={e}; or unset it") from None


@lru_cache(maxsize=1)
def detected() -> Target:
    """This machine as /proc/cpuinfo and /sys describe it (with portable fallbacks), whatever
    LOOPTUNE_HOST_ISA says: what `-march=native` builds for."""
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
    vector_bits = vector_bits_of(flags)
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


# Per architecture, the defaults of a GPU target that is named rather than detected (and of
# the fallback when no GPU can be queried): SMs, shared memory per block (opt-in maximum), L2.
_GPU_DEFAULTS = {
    "sm_70": dict(sm_count=80, smem_optin=98304, l2=6 << 20),
    "sm_75": dict(sm_count=40, smem_optin=65536, l2=4 << 20),
    "sm_80": dict(sm_count=108, smem_optin=166912, l2=40 << 20),
    "sm_86": dict(sm_count=84, smem_optin=101376, l2=6 << 20),
    "sm_89": dict(sm_count=128, smem_optin=101376, l2=72 << 20),
    "sm_90": dict(sm_count=132, smem_optin=232448, l2=50 << 20),
}

# Target.extra key -> the CU_DEVICE_ATTRIBUTE_<NAME> it is read from
CUDA_ATTRIBUTES = {
    "max_threads_per_block": "MAX_THREADS_PER_BLOCK",
    "shared_memory_bytes": "MAX_SHARED_MEMORY_PER_BLOCK",
    "max_shared_memory_per_block_optin": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "max_shared_memory_per_sm": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "max_registers_per_block": "MAX_REGISTERS_PER_BLOCK",
    "max_threads_per_sm": "MAX_THREADS_PER_MULTIPROCESSOR",
    "warp_size": "WARP_SIZE",
}


def _gpu_extra(arch: str, **known) -> tuple:
    d = _GPU_DEFAULTS.get(arch, _GPU_DEFAULTS["sm_90"])
    extra = {"max_threads_per_block": 1024, "shared_memory_bytes": 49152,
             "max_shared_memory_per_block_optin": d["smem_optin"],
             "max_shared_memory_per_sm": d["smem_optin"] + 1024,
             "max_registers_per_block": 65536, "max_threads_per_sm": 2048, "warp_size": 32}
    extra.update(known)
    return tuple(sorted(extra.items()))


def cuda_target(arch: str | None = None, model: str | None = None, *, device: int = 0) -> Target:
    """A CUDA target. With neither `arch` nor `model`: the GPU `device` as the driver reports
    it (cached), or, where no GPU or driver can be queried, the sm_90 defaults with a note in
    `model` saying so. With `arch` ("sm_80"): that architecture's typical limits, without
    asking the driver (to generate code for a GPU that is not here)."""
    if arch is None and model is None:
        return _detected_cuda(device)
    arch = arch or "sm_90"
    d = _GPU_DEFAULTS.get(arch, _GPU_DEFAULTS["sm_90"])
    return Target(kind="cuda", model=model or "", arch=arch, cores=d["sm_count"],
                  vector_bits=128, l2_bytes=d["l2"], extra=_gpu_extra(arch))


@lru_cache(maxsize=None)
def _detected_cuda(device: int) -> Target:
    try:
        from .cuda_device import DeviceQuery
        return cuda_target_from_device(DeviceQuery(device))
    except Exception:  # noqa: BLE001 - no cuda-python, no driver, no device: fall back
        # (why not: looptune.target.cuda_device.gpu_available())
        return cuda_target("sm_90", "default sm_90 limits: no CUDA GPU detected")


def cuda_target_from_device(query) -> Target:
    """A Target from a device query: `query.name()` and `query.attribute(NAME)`, the value of
    the driver's CU_DEVICE_ATTRIBUTE_<NAME> (runtime.cuda.DeviceQuery; tests pass a fake)."""
    major = query.attribute("COMPUTE_CAPABILITY_MAJOR")
    minor = query.attribute("COMPUTE_CAPABILITY_MINOR")
    arch = f"sm_{major}{minor}"
    known = {key: int(query.attribute(attr)) for key, attr in CUDA_ATTRIBUTES.items()}
    return Target(kind="cuda", model=query.name(), arch=arch,
                  cores=int(query.attribute("MULTIPROCESSOR_COUNT")), vector_bits=128,
                  l2_bytes=int(query.attribute("L2_CACHE_SIZE")), extra=_gpu_extra(arch, **known))
