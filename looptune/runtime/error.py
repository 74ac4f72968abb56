"""Errors of the build and run layer."""


class BuildError(RuntimeError):
    """The C compiler rejected generated code (or timed out); carries its message and the
    path of the source it was given."""

    def __init__(self, message: str, source_path: str | None = None, log: str = "",
                 timed_out: bool = False):
        super().__init__(message + (f"\n  source: {source_path}" if source_path else "")
                         + (f"\n{log.strip()}" if log.strip() else ""))
        self.source_path = source_path
        self.log = log
        self.timed_out = timed_out


class RunError(RuntimeError):
    """A compiled kernel failed when called (bad arguments, allocation failure, ...)."""
