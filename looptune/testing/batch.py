"""Many generated kernels in one C translation unit, so that the fuzzer pays for starting the
compiler and parsing the headers once per batch rather than once per kernel (about half of
the compile time of a small kernel).

Each kernel's file-scope static names and typedefs (helpers such as lt_max_float32, the
thread count, vector types) are renamed with #define to carry the kernel's symbol, so that
kernels defining the same helper do not clash (each kernel's thread-count setter already
carries its symbol). A batch that does not compile this way is compiled kernel by
kernel, as the ordinary build does."""
from __future__ import annotations

import re

from ..codegen import CRenderer

_STATIC = re.compile(r"^static\b.*$", re.M)
_TYPEDEF = re.compile(r"^typedef\b.*?\b(\w+)(?:\s+__attribute__\(\(.*\)\))?;\s*$", re.M)
_CALLED = re.compile(r"(\w+)\s*\(")
_VARIABLE = re.compile(r"static\s+[\w\s*]*?(\w+)\s*(?:=|;|\[)")
_NOT_NAMES = {"__attribute__", "aligned", "noinline", "vector_size", "sizeof"}


def file_scope_names(source: str) -> set:
    """The static functions and variables and the typedefs a kernel's source defines."""
    names = {m.group(1) for m in _TYPEDEF.finditer(source)}
    for line in _STATIC.findall(source):
        fn = next((m for m in _CALLED.findall(line) if m not in _NOT_NAMES), None)
        var = _VARIABLE.match(line)
        if var is not None and (fn is None or line.index(var.group(1)) < line.index(fn)):
            names.add(var.group(1))
        elif fn is not None:
            names.add(fn)
    return names


def merged_source(kernels) -> str:
    """One translation unit holding `kernels`, a list of (symbol, rendered C source)."""
    preamble = CRenderer.preamble
    out = [preamble]
    for symbol, source in kernels:
        body = source.replace(preamble, "")
        renames = {n: f"{symbol}__{n}" for n in sorted(file_scope_names(body))}
        out += [f"#define {old} {new}" for old, new in renames.items()]
        out.append(body)
        out += [f"#undef {old}" for old in renames]
    return "\n".join(out) + "\n"
