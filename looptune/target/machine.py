"""The hardware fingerprint of a measuring machine: CPU model, ISA extensions, cores and GPU.

Every record stores the fingerprint of the machine that timed it (`measure["machine"]`), so
records timed on different machines are never ranked against each other (a time on a Zen 3
says nothing about one on an Ice Lake), and a run can say where each record came from. A
record written before fingerprints existed has none and counts as timed here."""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

from .target import host


def _gpus() -> list:
    """The NVIDIA GPUs the driver lists (/proc/driver/nvidia), by model name; [] without one.
    Read from the driver's files, not through CUDA, so fingerprinting costs no CUDA start."""
    names = []
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            for line in info.read_text().splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "Model":
                    names.append(value.strip())
        except OSError:
            continue
    return names


def fingerprint_id(cpu: str, isa: list, cores: int, gpu: list) -> str:
    """The short stable id of a fingerprint's fields: equal ids, the same kind of machine."""
    blob = json.dumps([cpu, sorted(isa), int(cores), list(gpu)], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@lru_cache(maxsize=1)
def machine_fingerprint() -> dict:
    """This machine's fingerprint (JSON-ready): {"id", "cpu", "isa", "cores", "gpu"}. `isa`
    lists the extensions code may use (Target.isa_features), `cores` the CPUs this process
    may run on, `gpu` the NVIDIA GPUs' names."""
    t = host()
    cpu, isa, cores, gpu = t.model or t.arch or "unknown", list(t.isa_features()), t.cores, _gpus()
    return {"id": fingerprint_id(cpu, isa, cores, gpu), "cpu": cpu, "isa": isa, "cores": cores,
            "gpu": gpu}


def machine_id(measure: dict | None) -> str:
    """The fingerprint id of a record's `measure` dict: this machine's when it has none (a
    record written before fingerprints existed, or settings that name no machine)."""
    m = (measure or {}).get("machine")
    if isinstance(m, dict) and isinstance(m.get("id"), str):
        return m["id"]
    return machine_fingerprint()["id"]


def describe(fp: dict) -> str:
    """One line naming a fingerprint: "AMD EPYC, 2 cores, avx512f (a1b2c3d4e5f60718)"."""
    isa = fp.get("isa") or []
    top = next((f for f in ("avx512f", "avx2", "avx", "sse4_2", "asimd") if f in isa), "")
    gpu = f", {', '.join(fp['gpu'])}" if fp.get("gpu") else ""
    return (f"{fp.get('cpu', '?')}, {fp.get('cores', '?')} cores"
            f"{', ' + top if top else ''}{gpu} ({fp.get('id', '?')})")
