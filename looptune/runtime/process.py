"""Child processes that die with their parent: compilers and measurement workers.

Each child starts in a process group of its own (its session), so that a timeout or Ctrl-C
kills the whole group - a compiler driver and the cc1/as it started, a worker and whatever it
started - and nothing of it is left running. Should the parent itself be killed (SIGKILL,
the OOM killer), two things take the group down with it:
- PR_SET_PDEATHSIG (Linux): the kernel sends the child SIGKILL when the thread that started
  it ends. It reaches the direct child only (a fork clears it), and fires when that *thread*
  ends: a child that outlives the call starting it (`lasting`) gets it only when started from
  the main thread;
- the reaper: one small process per parent (`python -I -S`, in its own session) that reads
  the process groups to kill from a pipe whose writing end only the parent holds (each child
  registers its own group there before its command runs, the parent unregisters it once
  reaped); when the parent dies the pipe closes, and the reaper kills every group still
  registered.
Starting a child through Python (preexec_fn) rules out vfork: a fork of a large parent costs
milliseconds, next to a compile's tenths of a second.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
except (OSError, AttributeError):
    _prctl = None

_REAPER = r"""
import os, signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
groups, buf = set(), b""
while True:
    data = os.read(0, 4096)
    if not data:
        break
    buf += data
    *lines, buf = buf.split(b"\n")
    for line in lines:
        (groups.add if line[:1] == b"+" else groups.discard)(int(line[1:]))
for g in groups:
    try:
        os.killpg(g, signal.SIGKILL)
    except OSError:
        pass
"""

_lock = threading.Lock()
_transient: dict = {}  # pid -> Popen: children that end within the call starting them
_reaper = None  # (pid of this process, pid of its reaper, the pipe's writing end)


def _reaper_fd() -> int | None:
    """The writing end of this process's reaper pipe, starting the reaper first if this
    process has none (a fork starts its own, a killed one is replaced); None if it cannot
    start. Best effort: without a reaper, PR_SET_PDEATHSIG and the timeouts still stop the
    children."""
    global _reaper
    with _lock:
        if _reaper is not None and _reaper[0] == os.getpid():
            try:
                if os.waitpid(_reaper[1], os.WNOHANG) == (0, 0):
                    return _reaper[2]
            except ChildProcessError:  # reaped by someone else's waitpid(-1)
                pass
            os.close(_reaper[2])  # it was killed
        try:
            _reaper = _start_reaper()
        except OSError:
            _reaper = None
            return None
        return _reaper[2]


def _start_reaper() -> tuple:
    """(our pid, the reaper's, the writing end of its pipe): spawned without a Popen, which
    would warn at exit that it still runs, as it does until we are gone."""
    read, write = os.pipe()  # neither end is inherited by other children
    # stdout and stderr to /dev/null: a caller reading ours to the end must not wait for it
    quiet = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
    try:
        pid = os.posix_spawn(sys.executable, [sys.executable, "-I", "-S", "-c", _REAPER],
                             os.environ, setsid=True,
                             file_actions=[(os.POSIX_SPAWN_DUP2, read, 0), *quiet])
    except OSError:
        os.close(write)
        raise
    finally:
        os.close(read)
    return os.getpid(), pid, write


def _in_child(parent: int, pdeathsig: bool, reaper: int | None):
    """The preexec_fn of a child, run after setsid and before exec: SIGKILL when the parent's
    starting thread ends (at once if the parent is already gone); its group registered with
    the reaper before the command runs (one write, atomic, and no lock: another thread of
    the parent may have held it at the fork)."""
    def preexec():
        if pdeathsig:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGKILL)
        if reaper is not None:
            try:
                os.write(reaper, b"+%d\n" % os.getpid())
            except OSError:
                pass
    return preexec


def popen(cmd: list, *, lasting: bool = False, **kwargs) -> subprocess.Popen:
    """subprocess.Popen(cmd, **kwargs) in a new process group that dies with this process (see
    the module's docstring; `lasting`: the child outlives the calling thread's call, as a
    worker does). End it with `kill_group` or, once it has exited, `release`."""
    pdeathsig = _prctl is not None and (
        not lasting or threading.current_thread() is threading.main_thread())
    proc = subprocess.Popen(cmd, start_new_session=True,
                            preexec_fn=_in_child(os.getpid(), pdeathsig, _reaper_fd()),
                            **kwargs)
    if not lasting:
        _transient[proc.pid] = proc
    return proc


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of a `popen` child and reap the child."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:  # every process of the group has exited
        pass
    proc.wait()
    release(proc)


def release(proc: subprocess.Popen) -> None:
    """Forget the group of a `popen` child that has exited (its id may be reused)."""
    _transient.pop(proc.pid, None)
    fd = _reaper_fd()
    if fd is not None:
        try:
            os.write(fd, b"-%d\n" % proc.pid)
        except OSError:
            pass


def kill_transient() -> None:
    """SIGKILL the group of every child started by `popen` (not `lasting`) still running: on
    Ctrl-C, which reaches the main thread only, what other threads compile dies too (each of
    those threads then reaps its own child and reports it killed)."""
    for pid in list(_transient):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


class Compiles:
    """Work run on other threads (a thread pool's) that starts `popen` children, made safe to
    stop on Ctrl-C, which reaches the main thread only. Wrap each piece of work with `guard`;
    on Ctrl-C, `stop` lets nothing more begin and kills the children of what runs, again and
    again, until none is running. One kill is not enough: a thread that was starting its
    compiler while it ran registers the child just after, and would run it to the end while
    the pool's exit waits for it; and a piece the pool had picked up, but whose future the
    caller never saw (Ctrl-C inside `submit`), must not start at all."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running = 0
        self._stopped = False

    def guard(self, fn):
        """`fn`, run only if `stop` has not been called; counted while it runs."""
        def guarded(*args, **kwargs):
            with self._lock:
                if self._stopped:
                    raise KeyboardInterrupt("stopped before it began")
                self._running += 1
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self._running -= 1
        return guarded

    def stop(self, *, timeout: float = 10.0) -> None:
        with self._lock:
            self._stopped = True
        deadline = time.monotonic() + timeout
        while True:
            kill_transient()
            with self._lock:
                if not self._running:
                    return
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)


def run(cmd: list, *, timeout: float | None = None, cwd=None) -> subprocess.CompletedProcess:
    """Run cmd to the end (text stdout and stderr captured) in a group of its own; on a
    timeout (subprocess.TimeoutExpired), Ctrl-C or any other exception the group is killed
    first, compiler proper and assembler included."""
    proc = popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        proc.communicate()
        raise
    except BaseException:  # Ctrl-C: kill, close the pipes, and let it through
        kill_group(proc)
        for pipe in (proc.stdout, proc.stderr):
            pipe.close()
        raise
    release(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
