"""Child interpreters that run kernels for the tuner's runner and the fuzzer's sandbox: a
fresh `python -c boot fd parent_pid` connected by a socket (it imports only looptune, and
an uninstalled checkout works), in a process group of its own that dies with its parent
(process.py), and a stop that asks politely, then kills the group and reaps.

The child imports the very looptune its parent runs: `python -c` puts the working directory
first on sys.path, where another checkout (or any folder named looptune) would otherwise win,
so the boot code puts this one's root before it."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

from . import process

ROOT = str(Path(__file__).resolve().parents[2])


def start_child(boot: str, env: dict | None = None) -> tuple:
    """(process, our end of its socket) for a child running `boot`; OSError if it cannot
    start."""
    ours, theirs = socket.socketpair()
    env = {**os.environ, **(env or {}),
           "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    with theirs:
        try:
            boot = f"import sys; sys.path.insert(0, {ROOT!r}); {boot}"
            proc = process.popen([sys.executable, "-c", boot, str(theirs.fileno()),
                                  str(os.getpid())], lasting=True,
                                 pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env)
        except OSError:
            ours.close()
            raise
    return proc, Connection(ours.detach())


def child_connection(fd: int, parent_pid: int) -> Connection:
    """In a child of start_child: its socket as a Connection; Ctrl-C left to the parent,
    and the child exits as soon as the parent is gone, even while its main thread is stuck
    (in a hanging kernel, say)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()
    return Connection(fd)


def _exit_with_parent(parent_pid: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os._exit(0)


def stop_child(proc: subprocess.Popen, conn: Connection) -> None:
    try:
        conn.send(None)  # ask politely; a hung child is killed below
    except OSError:
        pass
    try:
        proc.wait(timeout=2.0)
        process.release(proc)
    except subprocess.TimeoutExpired:
        process.kill_group(proc)
    conn.close()


def kill_child(proc: subprocess.Popen) -> None:
    """Kill a child of start_child (and its process group) now, and reap it."""
    process.kill_group(proc)
