"""Text from databases and model files, made safe to print on a terminal."""
from __future__ import annotations

import unicodedata

# control (C0, DEL, C1), format (bidi overrides, zero-width), line and paragraph separators,
# surrogates: characters that move the cursor, clear the screen, or reorder what is shown
_UNSAFE = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs"))


def printable(text, *, keep: str = "") -> str:
    """`text` (any object: its str) with every control or format character escaped the way
    Python writes it ("\\x1b", "\\u202e"), except those in `keep` (e.g. "\\n"): a workload,
    task or operator name stored by someone else cannot clear the screen, recolour the
    terminal or spoof a line when looptune prints it."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c in keep or unicodedata.category(c) not in _UNSAFE
                   else c.encode("unicode_escape").decode("ascii") for c in s)


class EscapingWriter:
    """A text stream that escapes what `printable` escapes, except newlines, carriage
    returns and tabs (the layout of looptune's own output); the rest is the wrapped
    stream's."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, s: str) -> int:
        self.stream.write(printable(s, keep="\n\r\t"))
        return len(s)

    def __getattr__(self, name):
        return getattr(self.stream, name)
