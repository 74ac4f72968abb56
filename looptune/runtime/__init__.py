"""Compile generated C with the system compiler, load it, call and time it."""
from .compiler import CFLAGS, compile_shared, compiler_version, have_compiler
from .error import BuildError, IndexRangeError, RunError
from .module import ArgInfo, Module, ProfileResult
from .ndarray import aligned, empty, random_args

__all__ = ["ArgInfo", "BuildError", "CFLAGS", "IndexRangeError", "Module", "ProfileResult", "RunError", "aligned",
           "compile_shared", "compiler_version", "empty", "have_compiler", "random_args"]
