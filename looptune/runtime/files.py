"""Files that several processes share (the kernel cache, exported models): written whole
under a temporary name and renamed into place, hashed, and guarded by an fcntl lock."""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def atomic_write(path, data=None, *, copy_of=None) -> Path:
    """Write `data` (bytes or str), or a copy of the file `copy_of`, to a new file beside
    `path`, then rename it into place: a reader sees the old file or the new one, never half
    of one, and a process that has the old one mapped (a loaded library) keeps it (a new
    inode, not the old one rewritten). Temporary names are `.<name>.*.tmp`."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if copy_of is not None:
                with open(copy_of, "rb") as src:
                    shutil.copyfileobj(src, f, 1 << 20)
            else:
                f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


@contextmanager
def locked(path, *, shared: bool = False):
    """Hold an flock on the file `path` (created if needed): exclusive for a writer, shared
    for a reader. The kernel drops it when the process dies, so a killed writer never leaves
    it held. A reader that cannot lock goes on unlocked (where it may not create the lock
    file, no writer of this looptune can write either)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        if not shared:
            raise
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            yield
            return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
    except OSError:  # a file system without locks
        if not shared:
            os.close(fd)
            raise
    try:
        yield
    finally:
        os.close(fd)  # releases the lock
