"""The system C compiler: compile source into an object and link it into a shared library,
cached by a hash of source, flags, compiler version and the ISA built for. Beside each library
a description (`<stem>.json`) holds that ISA and the hashes of the library and its object,
which loading checks; every file is written atomically and one process at a time builds a
key (an flock), so concurrent builds never see half a file."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from .. import env
from ..error import BuildError
from . import process
from .files import atomic_write, locked, sha256_file

CFLAGS = (
    "-O3",                   # full optimization, including the loop vectorizer
    "-march=native",         # this host's ISA; backend.cpu puts a Target's own ISA here
    "-mtune=generic",        # scheduled for no CPU in particular (backend.cpu.isa_flags: why)
    "-fopenmp",              # parallel loops and `omp simd`
    "-fPIC", "-shared",      # a loadable shared library
    "-std=gnu11",            # C11 plus GCC vector extensions
    "-ffp-contract=fast",    # fuse a*b+c into FMA instructions
    "-fno-math-errno",       # math intrinsics need not set errno (lets them vectorize)
    "-fno-trapping-math",    # no code reads floating-point exception flags: a NaN-aware
                             # clip of a rounded value may then be if-converted and
                             # vectorized (a quantizing epilogue ran 7x faster); results
                             # and NaN semantics are unchanged
)


@lru_cache(maxsize=None)
def compiler_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildError(f"cannot run the C compiler {cc!r} ({e}); install gcc or set CC") from None
    if out.returncode != 0:
        detail = out.stderr.strip()[:200]
        raise BuildError(f"the C compiler {cc!r} does not run (`{cc} --version` exits "
                         f"{out.returncode}{': ' + detail if detail else ''}); install gcc or "
                         "set CC to a working C compiler")
    return out.stdout.splitlines()[0] if out.stdout else cc


def workaround_flags(cc: str) -> list[str]:
    """Flags that keep a known compiler bug out of generated kernels. GCC (12.2 seen; not
    clang) if-converts loops whose loads a condition guards into masked vector loads that
    yield zeros: `for i: { float t[6]; for j: t[j] = i >= 1 ? X[6*i + j - 6] : 0.5f; ... }`
    at -O3 with AVX, AVX2 or AVX-512 (shrunk fuzz cases in tests/fuzz/cases/)."""
    return [] if "clang" in compiler_version(cc).lower() else ["-fno-tree-loop-if-convert"]


def have_compiler(cc: str | None = None) -> bool:
    try:
        compiler_version(cc or env.cc())
        return True
    except BuildError:
        return False


def compile_shared(source: str, *, name: str = "kernel", flags=None, cc: str | None = None,
                   timeout: float | None = None, isa: dict | None = None) -> Path:
    """Compile C source into a shared library (or reuse the cached one); returns its path.

    The library is linked from an object file kept beside it (`object_of(path)`), so that a
    model links the very object its kernel was verified with instead of compiling the source
    again. `isa` ({"arch", "features", "fingerprint"}: Target.isa()) is what the code is built
    for: it is part of the cache key and is written beside the library (`<stem>.json`), where
    loading it (runtime.Module) checks that this machine has that ISA."""
    cc = cc or env.cc()
    flags, compile_flags = _flags(flags, cc)
    key = _key(source, compile_flags, cc, isa)
    cache = _cache_dir("kernels")
    stem = f"{_file_name(name)}_{key[:20]}"
    so_path, meta_path = cache / f"{stem}.so", cache / f"{stem}.json"
    meta = {"format": ARTIFACT_FORMAT, "isa": isa, "compiler": compiler_version(cc),
            "flags": compile_flags, "key": key}
    if _is_built(so_path, meta, ("so", "o")):
        return so_path
    # one process builds a key at a time; the others wait, then find it built
    with _lock(cache / f"{stem}.lock"):
        if _is_built(so_path, meta, ("so", "o")):
            return so_path
        src_path = cache / f"{stem}.c"
        _atomic_write(src_path, source)
        obj = object_of(so_path)
        _write_atomically(obj, ".o", lambda tmp: _run_cc(
            [cc, *compile_flags, "-c", str(src_path), "-o", tmp], str(src_path), timeout))
        _link_atomically(so_path, lambda tmp: _run_cc(
            [cc, *_link_flags(flags), str(obj), "-o", tmp, "-lm"], f"linking {obj}", timeout))
        # written last: a description says the parts beside it are whole
        _atomic_write(meta_path, json.dumps(_sealed(meta, so_path, ("so", "o")), indent=1))
    return so_path


ARTIFACT_FORMAT = 3  # of the JSON beside a cached library: 2 added "isa", 3 "parts"


def object_of(so_path) -> Path:
    """The object file a library of compile_shared was linked from."""
    return Path(so_path).with_suffix(".o")


def read_meta(so_path) -> dict | None:
    """What compile_shared wrote beside the library (format, isa, compiler, flags, key), or
    None if there is nothing readable."""
    try:
        return json.loads(Path(so_path).with_suffix(".json").read_text())
    except (OSError, ValueError):
        return None


def damage(so_path, parts=("so",)) -> str | None:
    """What is wrong with the files of a cached library: one of `parts` (the library "so",
    the object it was linked from "o") unreadable or not hashing as the description beside
    it says (a truncated or replaced file); None if they are whole or nothing describes them."""
    so_path = Path(so_path)
    sums = (read_meta(so_path) or {}).get("parts") or {}
    for part in parts:
        if part not in sums:
            continue
        path = so_path.with_suffix(f".{part}")
        try:
            if sha256_file(path) != sums[part]:
                return (f"{path.name} does not match the hash in {so_path.stem}.json "
                        "(truncated, or replaced by another build)")
        except OSError as e:
            return f"{path.name} cannot be read ({e.strerror or e})"
    return None


def _sealed(meta: dict, so_path: Path, parts) -> dict:
    """`meta` with the hashes of the library's parts."""
    return {**meta, "parts": {p: sha256_file(so_path.with_suffix(f".{p}")) for p in parts}}


def _is_built(so_path: Path, meta: dict, parts) -> bool:
    """Whether the cache holds the library `meta` describes, whole."""
    if not so_path.exists():
        return False
    have = read_meta(so_path)
    if have is None or {k: v for k, v in have.items() if k != "parts"} != meta:
        return False
    return set(parts) <= set(have.get("parts") or ()) and damage(so_path, parts) is None


@contextmanager
def _lock(path: Path):
    try:
        with locked(path):
            yield
    except OSError as e:
        raise BuildError(f"cannot lock {path} ({e.strerror or e}); set LOOPTUNE_CACHE_DIR to a "
                         "directory this process can write") from None


def _key(source: str, flags: list, cc: str, isa: dict | None) -> str:
    """The cache key: source, flags, compiler and version, the ISA fingerprint, and what
    -march=native means on this host (two hosts share a cache directory safely)."""
    parts = [source, " ".join(flags), compiler_version(cc),
             (isa or {}).get("fingerprint", "")]
    if "-march=native" in flags:
        parts.append(native_arch(cc))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


@lru_cache(maxsize=None)
def native_arch(cc: str) -> str:
    """What -march=native stands for here (GCC: `-march=znver4`, ...; "" where the compiler
    does not say)."""
    try:
        out = subprocess.run([cc, "-march=native", "-Q", "--help=target"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    for line in out.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "-march=":
            return words[1]
    return ""


def _flags(flags, cc: str) -> tuple[list, list]:
    """(the flags asked for - default CFLAGS and the compiler's workarounds -, those an object
    is compiled with: without -shared, with LOOPTUNE_CFLAGS)."""
    flags = list(CFLAGS) + workaround_flags(cc) if flags is None else list(flags)
    return flags, [f for f in flags if f != "-shared"] + env.extra_cflags()


def _link_flags(flags: list) -> list:
    """The flags a shared library is linked with: -shared, and OpenMP's runtime if compiled
    with it."""
    return ["-shared"] + [f for f in flags if f in ("-fopenmp", "-fPIC")]


def _run_cc(cmd: list, what: str, timeout: float | None, cwd=None) -> None:
    """Run the compiler; BuildError (naming `what`) if it fails or takes too long."""
    # its own process group: on a timeout or Ctrl-C the compiler proper (cc1) dies with the
    # driver instead of running on, orphaned, for minutes; and all of it dies with us
    try:
        out = process.run(cmd, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise BuildError(f"the C compiler took longer than {timeout} s; allow it more time "
                         "(the builder's timeout)", what, timed_out=True) from None
    if out.returncode != 0:
        raise BuildError(f"the C compiler failed (exit {out.returncode}); check CC and "
                         "LOOPTUNE_CFLAGS, and if they are fine, code generated by looptune "
                         "that does not compile is a bug: please report it with the source",
                         what, out.stderr[-4000:])


def _link_atomically(so_path: Path, build) -> Path:
    """build(tmp) writes the library to a temporary name; it then replaces so_path at once."""
    return _write_atomically(so_path, ".so", build)


def _write_atomically(path: Path, suffix: str, build) -> Path:
    """build(tmp) writes a file to a temporary name; it then replaces `path` at once."""
    try:
        fd, tmp = tempfile.mkstemp(suffix=suffix, dir=path.parent)
    except OSError as e:
        raise BuildError(f"cannot write in {path.parent} ({e.strerror or e}); set "
                         "LOOPTUNE_CACHE_DIR to a directory this process can write (with free "
                         "space)") from None
    os.close(fd)
    try:
        build(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _file_name(name: str) -> str:
    """A kernel's name as a file name: a workload's name may hold '/', '..' or newlines."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "_" for c in name[:40])


def _cache_dir(sub: str) -> Path:
    """The kernel cache's sub-directory `sub`, created if needed."""
    try:
        d = env.cache_dir() / sub
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BuildError(f"the kernel cache {e.filename or ''} cannot be created "
                         f"({e.strerror or e}); set LOOPTUNE_CACHE_DIR to a directory this "
                         "process can write") from None
    return d


def _atomic_write(path: Path, text):
    try:
        atomic_write(path, text)
    except OSError as e:
        raise BuildError(f"cannot write {path} ({e.strerror or e}); set LOOPTUNE_CACHE_DIR to "
                         "a directory this process can write (with free space)") from None


def compile_library(units: list, *, name: str = "library", timeout: float | None = None,
                    jobs: int | None = None, data_files: dict | None = None, objects=(),
                    flags=None, isa: dict | None = None) -> Path:
    """Compile several translation units and link them, with `objects` compiled before
    (compile_shared's, `object_of`), into one shared library (cached like compile_shared).
    `units` are (file name, text, extra flags); a name ending in `.S` is assembly. Each unit
    compiles on its own (the units may define the same static helpers), `jobs` at a time.
    `data_files` ({file name: bytes}) are written beside the sources first, for assembly to
    `.incbin`. `flags` and `isa` as for compile_shared."""
    from concurrent.futures import ThreadPoolExecutor
    cc = env.cc()
    flags, compile_flags = _flags(flags, cc)
    h = hashlib.sha256(_key("", compile_flags, cc, isa).encode())
    for fname, text, extra in units:
        h.update("\0".join([fname, " ".join(extra), text]).encode())
    for fname, data in sorted((data_files or {}).items()):
        h.update(fname.encode() + hashlib.sha256(data).digest())
    objects = [Path(o) for o in objects]
    for obj in objects:
        try:
            h.update(hashlib.sha256(obj.read_bytes()).digest())
        except OSError as e:
            raise BuildError(f"cannot read the object {obj} to link into {name} "
                             f"({e.strerror or e}); build its kernel again") from None
    key = h.hexdigest()
    out_dir = _cache_dir("libraries") / f"{_file_name(name)}_{key[:20]}"
    so_path = out_dir / f"{_file_name(name)}.so"
    meta = {"format": ARTIFACT_FORMAT, "isa": isa, "key": key}
    if _is_built(so_path, meta, ("so",)):
        return so_path
    # one process builds a key at a time (they would write the same sources and objects)
    with _lock(out_dir.with_suffix(".lock")):
        if _is_built(so_path, meta, ("so",)):
            return so_path
        out_dir.mkdir(parents=True, exist_ok=True)
        for fname, data in (data_files or {}).items():
            _atomic_write(out_dir / fname, data)

        def compile_one(unit):
            fname, text, extra = unit
            src = out_dir / fname
            _atomic_write(src, text)
            obj = src.with_suffix(".o")
            _run_cc([cc, *compile_flags, *extra, "-c", str(src), "-o", str(obj)], str(src),
                    timeout, cwd=str(out_dir))
            return str(obj)

        compiles = process.Compiles()
        pool = ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1)
        try:
            futures = [pool.submit(compiles.guard(compile_one), unit) for unit in units]
            compiled = [f.result() for f in futures]
        except KeyboardInterrupt:  # the other units' compilers die too, started or starting
            pool.shutdown(wait=False, cancel_futures=True)
            compiles.stop()
            raise
        finally:
            pool.shutdown()
        every = [*compiled, *(str(o) for o in objects)]
        _link_atomically(so_path, lambda tmp: _run_cc(
            [cc, *_link_flags(flags), *every, "-o", tmp, "-lm"], f"linking {name} in {out_dir}",
            timeout))
        _atomic_write(so_path.with_suffix(".json"),
                      json.dumps(_sealed(meta, so_path, ("so",)), indent=1))
    return so_path
