"""The system C compiler: compile source into a shared library, cached by a hash of source,
flags and compiler version, written atomically so concurrent builds never see half a file."""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from .. import env
from .error import BuildError

CFLAGS = (
    "-O3",                   # full optimization, including the loop vectorizer
    "-march=native",         # this host's ISA (AVX2, AVX-512: as Target detects); run where built
    "-fopenmp",              # parallel loops and `omp simd`
    "-fPIC", "-shared",      # a loadable shared library
    "-std=gnu11",            # C11 plus GCC vector extensions
    "-ffp-contract=fast",    # fuse a*b+c into FMA instructions
    "-fno-math-errno",       # math intrinsics need not set errno (lets them vectorize)
)


@lru_cache(maxsize=None)
def compiler_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildError(f"cannot run the C compiler {cc!r} ({e}); install gcc or set CC") from None
    if out.returncode != 0:
        raise BuildError(f"the C compiler {cc!r} does not run: {out.stderr.strip()}")
    return out.stdout.splitlines()[0] if out.stdout else cc


def have_compiler(cc: str | None = None) -> bool:
    try:
        compiler_version(cc or env.cc())
        return True
    except BuildError:
        return False


def compile_shared(source: str, *, name: str = "kernel", flags=None, cc: str | None = None,
                   timeout: float | None = None) -> Path:
    """Compile C source into a shared library (or reuse the cached one); returns its path."""
    cc = cc or env.cc()
    flags = list(CFLAGS if flags is None else flags) + env.extra_cflags()
    key = hashlib.sha256("\0".join([source, " ".join(flags), compiler_version(cc)]).encode()).hexdigest()
    cache = env.cache_dir() / "kernels"
    cache.mkdir(parents=True, exist_ok=True)
    stem = f"{name[:40]}_{key[:20]}"
    so_path = cache / f"{stem}.so"
    src_path = cache / f"{stem}.c"
    if so_path.exists():
        if not src_path.exists():
            _atomic_write(src_path, source)
        return so_path
    _atomic_write(src_path, source)
    return _link_atomically(so_path, lambda tmp: _run_cc(
        [cc, *flags, str(src_path), "-o", tmp, "-lm"], str(src_path), timeout))


def _run_cc(cmd: list, what: str, timeout: float | None, cwd=None) -> None:
    """Run the compiler; BuildError (naming `what`) if it fails or takes too long."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise BuildError(f"the C compiler took longer than {timeout} s", what,
                         timed_out=True) from None
    if out.returncode != 0:
        raise BuildError(f"the C compiler failed (exit {out.returncode})", what,
                         out.stderr[-4000:])


def _link_atomically(so_path: Path, build) -> Path:
    """build(tmp) writes the library to a temporary name; it then replaces so_path at once."""
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=so_path.parent)
    os.close(fd)
    try:
        build(tmp)
        os.replace(tmp, so_path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return so_path


def _atomic_write(path: Path, text: str):
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def compile_library(units: list, *, name: str = "library", timeout: float | None = None,
                    jobs: int | None = None, data_files: dict | None = None) -> Path:
    """Compile several translation units and link them into one shared library (cached like
    compile_shared). `units` are (file name, text, extra flags); a name ending in `.S` is
    assembly. Each unit compiles on its own (the units may define the same static helpers),
    `jobs` at a time. `data_files` ({file name: bytes}) are written beside the sources first,
    for assembly to `.incbin`."""
    from concurrent.futures import ThreadPoolExecutor
    cc = env.cc()
    flags = list(CFLAGS) + env.extra_cflags()
    h = hashlib.sha256("\0".join([" ".join(flags), compiler_version(cc)]).encode())
    for fname, text, extra in units:
        h.update("\0".join([fname, " ".join(extra), text]).encode())
    for fname, data in sorted((data_files or {}).items()):
        h.update(fname.encode() + hashlib.sha256(data).digest())
    key = h.hexdigest()
    out_dir = env.cache_dir() / "libraries" / f"{name[:40]}_{key[:20]}"
    so_path = out_dir / f"{name[:40]}.so"
    if so_path.exists():
        return so_path
    out_dir.mkdir(parents=True, exist_ok=True)
    for fname, data in (data_files or {}).items():
        (out_dir / fname).write_bytes(data)
    compile_flags = [f for f in flags if f != "-shared"]

    def compile_one(unit):
        fname, text, extra = unit
        src = out_dir / fname
        _atomic_write(src, text)
        obj = src.with_suffix(".o")
        _run_cc([cc, *compile_flags, *extra, "-c", str(src), "-o", str(obj)], str(src),
                timeout, cwd=str(out_dir))
        return str(obj)

    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        objects = list(pool.map(compile_one, units))
    return _link_atomically(so_path, lambda tmp: _run_cc(
        [cc, *flags, *objects, "-o", tmp, "-lm"], f"linking {name} in {out_dir}", timeout))
