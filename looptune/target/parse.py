"""TVM's target strings: "llvm -mcpu=core-avx2", "llvm -mattr=+avx2,+fma -num-cores=4",
"cuda -arch=sm_80". A named CPU stands for its ISA (cpus.py), whatever this machine is:
code is built for that ISA, and refused where it must run on a machine that lacks it."""
from __future__ import annotations

from dataclasses import replace

from .cpus import ARM_CPUS, X86_CPUS
from .target import ISA_FEATURES, Target, TargetError, cuda_target, host, vector_bits_of

# options TVM's tutorials pass that say nothing about the code looptune makes
_IGNORED = ("-keys", "-libs", "-model", "-opt-level", "-link-params", "-mabi", "-mfloat-abi")
_CPU_OPTIONS = ("-mcpu", "-mattr", "-mtriple", "-num-cores")


def _options(spec: str, words: list, allowed: tuple) -> dict:
    opts = {}
    for w in words:
        key, eq, value = w.partition("=")
        if key in _IGNORED:
            continue
        if key not in allowed or not eq or not value:
            raise TargetError(f"target {spec!r}: {w!r} is not an option looptune reads; it "
                              f"reads {', '.join(o + '=' for o in allowed)} (and ignores "
                              f"{', '.join(_IGNORED)})")
        opts[key] = value
    return opts


def _cpu_base(spec: str, opts: dict) -> Target:
    here = host()
    mcpu = opts.get("-mcpu")
    triple = opts.get("-mtriple", "")
    if mcpu in (None, "native") and "-mattr" not in opts:
        if triple and not triple.startswith(here.arch):
            raise TargetError(f"target {spec!r}: -mtriple={triple} is not this machine "
                              f"({here.arch}); looptune builds C for this machine's "
                              "architecture only")
        return here
    arch = "aarch64" if triple.startswith("aarch64") or mcpu in ARM_CPUS else "x86_64"
    if mcpu in (None, "native"):
        feats = set(here.features) if mcpu == "native" else set(X86_CPUS["x86-64"])
    elif mcpu in X86_CPUS:
        feats = set(X86_CPUS[mcpu])
    elif mcpu in ARM_CPUS:
        feats = set(ARM_CPUS[mcpu])
    else:
        raise TargetError(f"target {spec!r}: unknown -mcpu={mcpu}; looptune knows "
                          f"{', '.join(sorted(X86_CPUS) + sorted(ARM_CPUS))} and native "
                          "(this machine), or name extensions with -mattr=+avx2,+fma")
    return Target(kind="cpu", model=mcpu or "x86-64", arch=arch, features=tuple(sorted(feats)),
                  cores=here.cores, vector_bits=vector_bits_of(feats),
                  l1d_bytes=here.l1d_bytes, l2_bytes=here.l2_bytes, l3_bytes=here.l3_bytes)


def _with_mattr(spec: str, target: Target, mattr: str) -> Target:
    feats = set(target.features)
    for item in mattr.split(","):
        sign, name = item[:1], item[1:].replace(".", "_").replace("-", "_")
        name = {"sse4_1": "sse4_1", "sse3": "pni", "bmi": "bmi1", "sha": "sha_ni"}.get(name, name)
        if sign not in "+-" or not sign or name not in ISA_FEATURES:
            raise TargetError(f"target {spec!r}: -mattr item {item!r} is not +name or -name of "
                              "an ISA extension (e.g. +avx2,+fma,-avx512f)")
        (feats.add if sign == "+" else feats.discard)(name)
    return replace(target, features=tuple(sorted(feats)), vector_bits=vector_bits_of(feats))


def parse_target(spec: str) -> Target:
    words = spec.strip().lower().split()
    kind, rest = words[0], words[1:]
    if kind in ("cuda", "nvptx"):
        opts = _options(spec, rest, ("-arch", "-max_num_threads", "-thread_warp_size"))
        return cuda_target(opts["-arch"]) if "-arch" in opts else cuda_target()
    opts = _options(spec, rest, _CPU_OPTIONS)
    target = _cpu_base(spec, opts)
    if "-mattr" in opts:
        target = _with_mattr(spec, target, opts["-mattr"])
    if "-num-cores" in opts:
        n = opts["-num-cores"]
        if not n.isdigit() or int(n) < 1:
            raise TargetError(f"target {spec!r}: -num-cores must be a whole number >= 1")
        target = replace(target, cores=int(n))
    return target
