"""Export and load of a compiled CPU model (DESIGN contract 10): a directory holding
model.json and the library it names, `model-<16 hex digits of its sha256>.so`.

Export writes the library under its content's name, then the description, each to a new file
renamed into place, holding an exclusive flock of the directory's `.lock`; then it removes the
libraries no description names. So a process running the model keeps its library (another
inode, or the same bytes), a kill at any moment leaves the previous export whole, and of
concurrent exports to one path one wins whole. Load holds the lock shared and checks, before
the library is mapped: the description parses and has every field, its format version, that
this machine has the ISA, the library's sha256, the hash of the description's semantic part;
after: that the library was built for that hash (`lt_model_hash`)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..error import BuildError
from ..runtime.files import atomic_write, locked, sha256_file
from ..target import host
from ..tir import dtype as dt
from .executor import FORMAT_VERSION, CompiledModel, ModelError, semantic_hash

DESC, LOCK = "model.json", ".lock"
LIBRARY = re.compile(r"model-[0-9a-f]{16}\.so")
STALE = re.compile(r"model(-[0-9a-f]{16})?\.so|\.model[-.].*\.tmp")  # old libraries, killed writes
AGAIN = "export the model again"


def export_model(model: CompiledModel, path) -> Path:
    path = Path(path)
    if not model.lib_path.is_file():
        raise ModelError(f"{model.lib_path}, the library of this model, is gone (a later export "
                         "to its directory replaced it); load or compile the model again, then "
                         "export it")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with locked(path / LOCK):
            sha = sha256_file(model.lib_path)
            lib = path / f"model-{sha[:16]}.so"
            if not (lib.exists() and sha256_file(lib) == sha):
                atomic_write(lib, copy_of=model.lib_path)
            desc = {**model.desc, "library": {"file": lib.name, "sha256": sha}}
            atomic_write(path / DESC, json.dumps(desc, indent=2) + "\n")
            for f in path.iterdir():
                if f != lib and STALE.fullmatch(f.name):
                    f.unlink(missing_ok=True)
    except OSError as e:
        raise ModelError(f"cannot export the model to {path} ({e.strerror or e}); export it "
                         "to a directory this process can write, with free space") from None
    return path


def load(path) -> CompiledModel:
    """A model written by CompiledModel.export; ModelError (naming the file, what does not
    match and what to do) for anything damaged, edited, mismatched or built for an ISA this
    machine lacks."""
    path = Path(path)
    if not (path / DESC).is_file():
        raise ModelError(f"{path} is not an exported looptune model (it has no {DESC}); write "
                         "one with compiled.export(path)")
    with locked(path / LOCK, shared=True):  # no export replaces what is checked and mapped
        desc = read_description(path / DESC)
        lib = path / desc["library"]["file"]
        try:
            sha = sha256_file(lib)
        except OSError as e:
            raise ModelError(f"{lib}, the library {path / DESC} names, cannot be read "
                             f"({e.strerror or e}); {AGAIN}") from None
        if sha != desc["library"]["sha256"]:
            raise ModelError(f"{lib} does not match the hash in {path / DESC} (truncated, or "
                             f"from another model or export); {AGAIN}")
        try:
            return CompiledModel(lib, desc, threads_from=str(path / DESC))
        except (OSError, AttributeError, BuildError) as e:
            raise ModelError(f"{lib} cannot be loaded as a looptune model ({e}); {AGAIN}") \
                from None


def read_description(where: Path) -> dict:
    """The checked description of an exported model: well formed, this format, for an ISA
    this machine has, its semantic part unedited."""
    try:
        desc = json.loads(where.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelError(f"{where} cannot be read ({e}); {AGAIN}") from None
    if not isinstance(desc, dict):
        raise ModelError(f"{where} is not a model description (a JSON object); {AGAIN}")
    if desc.get("format") != FORMAT_VERSION:
        raise ModelError(f"{where} has model format {desc.get('format')}, this looptune reads "
                         f"{FORMAT_VERSION}; export it again")
    problem = _problem(desc)
    if problem:
        raise ModelError(f"{where} is damaged: {problem}; {AGAIN}")
    here = host()
    missing = here.lacks(desc["isa"])
    if missing:
        raise ModelError(f"{where}: the model was built for {', '.join(missing)}, which this "
                         f"machine ({here.model or here.arch}) lacks; it is not loaded. Run it "
                         "where it was built, or compile it here (target='cpu') and "
                         f"{AGAIN}")
    if semantic_hash(desc) != desc["hash"]:
        raise ModelError(f"{where} was edited after export (its shapes, dtypes, kernels, memory "
                         f"plan, weights or ISA differ from what the library was built for); "
                         f"{AGAIN}")
    return desc


def _problem(desc: dict) -> str | None:
    """What is missing or ill-typed in a description, or None."""
    def count(v):
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    # (num_threads is checked where it is applied, Module.set_num_threads: a count past this
    # machine's CPUs is clamped with a warning naming the file)
    for key in ("kernels", "arena_bytes", "weights_bytes"):
        if not count(desc.get(key)):
            return f'"{key}" must be a whole number >= 0, not {desc.get(key)!r}'
    for key in ("name", "hash", "weights_sha256"):
        if not isinstance(desc.get(key), str):
            return f'"{key}" must be a string, not {desc.get(key)!r}'
    for key in ("inputs", "outputs"):
        tensors = desc.get(key)
        if not isinstance(tensors, list) or not tensors:
            return f'"{key}" must be a list of tensors, not {tensors!r}'
        for t in tensors:
            problem = _tensor_problem(t, count)
            if problem:
                return f'{key}: {problem}'
    steps, lib, isa = desc.get("steps"), desc.get("library"), desc.get("isa")
    if not isinstance(steps, list) or not all(
            isinstance(s, dict) and isinstance(s.get("kernel"), str) for s in steps):
        return '"steps" must be a list of {"kernel", "output"}'
    if not isinstance(desc.get("tasks", []), list) or \
            not all(isinstance(t, dict) for t in desc.get("tasks", [])):
        return '"tasks" must be a list of objects'
    if not isinstance(lib, dict) or not isinstance(lib.get("file"), str) or \
            not LIBRARY.fullmatch(lib["file"]) or not isinstance(lib.get("sha256"), str):
        return f'"library" must be {{"file": "model-<hex>.so", "sha256"}} (a file beside it), ' \
               f'not {lib!r}'
    if not isinstance(isa, dict) or not isinstance(isa.get("arch"), str) or \
            not isinstance(isa.get("features"), list):
        return f'"isa" must be {{"arch", "features", ...}}, not {isa!r}'
    return None


def _tensor_problem(t, count) -> str | None:
    if not isinstance(t, dict) or not isinstance(t.get("name"), str):
        return f"{t!r} is not a tensor {{name, shape, dtype}}"
    shape, dtype = t.get("shape"), t.get("dtype")
    if not isinstance(shape, list) or not all(count(n) for n in shape):
        return f"{t['name']} has shape {shape!r}, not a list of whole numbers >= 0"
    try:
        ok = dt.parse(dtype)[1] == 1
    except dt.DTypeError:
        ok = False
    return None if ok else f"{t['name']} has dtype {dtype!r}, not a scalar data type"

