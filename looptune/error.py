"""The errors every layer raises and callers are meant to catch: BuildError (code could not be
generated or compiled, or an artifact cannot be used here) and RunError (a compiled kernel
failed when called). They live at the bottom so that codegen, runtime and backend share them
without importing one another; `looptune.runtime` re-exports them."""


# A kernel's status when an index loaded from memory was out of range: this plus the check's
# site (codegen/passes/check_index.py); `<symbol>_index_error` in its library says more.
INDEX_ERROR_STATUS = 0x20000000


class BuildError(RuntimeError):
    """The C compiler rejected generated code (or timed out), lowering cannot handle a
    schedule, or an artifact cannot be used on this machine; carries the compiler's message
    and the path of the source it was given."""

    def __init__(self, message: str, source_path: str | None = None, log: str = "",
                 timed_out: bool = False):
        super().__init__(message + (f"\n  source: {source_path}" if source_path else "")
                         + (f"\n{log.strip()}" if log.strip() else ""))
        self.source_path = source_path
        self.log = log
        self.timed_out = timed_out


class RunError(RuntimeError):
    """A compiled kernel failed when called (bad arguments, allocation failure, ...)."""


class IndexRangeError(RunError, IndexError):
    """A kernel met an index, loaded from memory, outside the axis it indexes (a gather's
    index out of range): the call raises, as numpy, torch and ONNX Runtime do, instead of
    reading out of bounds. `kernel`, `buffer`, `axis`, `size` and `value` say where."""

    def __init__(self, message: str, *, kernel: str = "", buffer: str = "", axis: int = -1,
                 size: int = 0, value: int = 0):
        super().__init__(message)
        self.kernel, self.buffer, self.axis, self.size, self.value = (kernel, buffer, axis,
                                                                      size, value)
