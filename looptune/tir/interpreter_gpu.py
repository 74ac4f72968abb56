"""Runs GPU programs (codegen.gpu.GpuProgram) in Python as the hardware would, thread by
thread: the threads of a block advance together from barrier to barrier, the lanes of a warp
(32 consecutive threads) meet at each warp shuffle, shared memory is one array per block,
`Allocate` is private to each thread. Every access to shared and written global memory is
checked, so a missing __syncthreads() or a reduction bound to threads is an error here
rather than a wrong answer on some runs of the real kernel."""
from __future__ import annotations

import itertools
import weakref

import numpy as np

from . import dtype as dt
from .expr import BufferLoad, Call
from .func import PrimFunc
from .functor import find_stmts, visit
from .interpreter import _env, _identifier, _PyGen, numpy_type
from .stmt import SHFL_DOWN_OP, Allocate, BlockRealize, BufferStore, For, is_barrier

_HW = {"threadIdx.x": "_tx", "threadIdx.y": "_ty", "threadIdx.z": "_tz",
       "blockIdx.x": "_bx", "blockIdx.y": "_by", "blockIdx.z": "_bz"}

_BARRIER_ADVICE = ("every thread of a block must reach the same __syncthreads(): keep barriers "
                   "out of conditions and loops that depend on threadIdx (including thread "
                   "loops shorter than the launch)")
_SHUFFLE_ADVICE = ("every lane of a warp (32 consecutive threads, x fastest) must reach the same "
                   "__shfl_down_sync(): keep shuffles out of conditions that split a warp, and "
                   "give the block whole warps")
WARP = 32


class GpuSyncError(RuntimeError):
    """A GPU program whose result depends on the timing of its threads: a data race
    (GpuRaceError) or a barrier not every thread of the block reaches (GpuBarrierError)."""

    def __init__(self, message: str, *, kernel: str, kind: str):
        super().__init__(message)
        self.kernel, self.kind = kernel, kind


class GpuRaceError(GpuSyncError):
    """Two threads access one element with no barrier ordering them, and one writes it.
    `kind`: "read-after-write", "write-after-read" or "write-write"; `buffer`, `index`
    (the flat element offset) and `threads` ((block, thread) index triples) say where."""

    def __init__(self, message, *, kernel, kind, buffer, index, threads):
        super().__init__(message, kernel=kernel, kind=kind)
        self.buffer, self.index, self.threads = buffer, index, threads


class GpuBarrierError(GpuSyncError):
    """A __syncthreads() that not every thread of the block reaches (kind "divergent
    barrier"), or a warp shuffle that not every lane of the warp reaches (kind "divergent
    shuffle"): real hardware hangs or runs on with garbage."""


# ------------------------------------------------------------------------------ codegen
class _KernelGen(_PyGen):
    """Python for one thread of a kernel. Global and shared buffers are flat arrays; the
    accesses that can race go through helpers _ld<k>(offset) / _st<k>(offset, value)."""

    def __init__(self, kernel, checked: dict, flat: set):
        super().__init__()
        self.kernel, self.checked, self.flat = kernel, checked, flat
        self.launch = dict(zip(("blockIdx.x", "blockIdx.y", "blockIdx.z"), kernel.grid))
        self.launch.update(zip(("threadIdx.x", "threadIdx.y", "threadIdx.z"), kernel.block))
        self.barriers: list[str] = []  # where each barrier is, for messages
        self.shuffles: list[str] = []  # where each warp shuffle is, for messages
        self.loops: list[str] = []

    def offset(self, buf, indices) -> str:
        strides = (1,) if buf.ndim == 1 and buf.strides is None else buf.layout_strides()
        terms = [self.expr(i) if st == 1 else f"{self.expr(i)} * {st}"
                 for i, st in zip(indices, strides)]
        return " + ".join(terms) or "0"

    def load(self, e: BufferLoad) -> str:
        if e.buffer not in self.flat:
            return super().load(e)
        off = self.offset(e.buffer, e.indices)
        k = self.checked.get(e.buffer)
        if k is not None:
            return f"_ld{k}({off})"
        # unchecked (read-only global): numpy catches offsets past the end, not below 0
        return f"{self.name(e.buffer)}[_o if (_o := {off}) >= 0 else _oob({e.buffer.name!r}, _o)]"

    def store(self, s: BufferStore, depth):
        if s.buffer not in self.flat:
            return super().store(s, depth)
        off, value = self.offset(s.buffer, s.indices), self.expr(s.value)
        k = self.checked.get(s.buffer)
        self.emit(depth, f"{self.name(s.buffer)}[{off}] = {value}" if k is None
                  else f"_st{k}({off}, {value})")  # (every flat buffer stored is checked)

    def where(self) -> str:
        return f"in loop {', '.join(self.loops)}" if self.loops else "at the kernel's top level"

    def evaluate(self, s, depth):
        if not is_barrier(s):
            return super().evaluate(s, depth)
        self.barriers.append(f"__syncthreads() #{len(self.barriers) + 1} ({self.where()})")
        self.emit(depth, f"yield {len(self.barriers) - 1}")

    def expr(self, e) -> str:
        if not (isinstance(e, Call) and e.op == SHFL_DOWN_OP):
            return super().expr(e)
        # a barrier yields its number; a shuffle (number, value, delta, width) and is sent
        # back the value it reads
        self.shuffles.append(f"__shfl_down_sync() #{len(self.shuffles) + 1} ({self.where()})")
        args = ", ".join(self.expr(a) for a in e.args)
        return f"(yield ({len(self.shuffles) - 1}, {args}))"

    def chained(self, s: For) -> bool:
        return s.kind != "thread_binding"

    def loop(self, s: For, depth):
        if s.kind != "thread_binding":
            chain = [s]
            while isinstance(chain[-1].body, For) and self.chained(chain[-1].body):
                chain.append(chain[-1].body)
            self.loops.extend(x.loop_var.name for x in chain)
            super().loop(s, depth)
            del self.loops[-len(chain):]
            return
        hw = _HW.get(s.thread)
        if hw is None:
            raise ValueError(f"kernel {self.kernel.name}: loop {s.loop_var.name} is bound to "
                             f"{s.thread}, which the GPU interpreter does not know; lower the "
                             "function with codegen.gpu.lower_gpu first")
        launched = self.launch[s.thread]
        if s.extent > launched:
            raise ValueError(f"kernel {self.kernel.name}: loop {s.loop_var.name} over "
                             f"{s.extent} is bound to {s.thread}, but only {launched} are "
                             "launched")
        self.emit(depth, f"{self.name(s.loop_var)} = {hw}")
        if s.extent < launched:
            self.emit(depth, f"if {self.name(s.loop_var)} < {s.extent}:")
            depth += 1
        self.stmt(s.body, depth)

    def stmt(self, s, depth):
        if isinstance(s, Allocate) and s.buffer.scope == "shared":
            raise ValueError(f"kernel {self.kernel.name}: shared buffer {s.buffer.name} is "
                             "allocated inside the body; list it in Kernel.shared")
        super().stmt(s, depth)


def _accesses(body) -> tuple[set, set]:
    """(buffers loaded, buffers stored) in `body`."""
    loads, stores = set(), set()

    def fn(n):
        if isinstance(n, BufferLoad):
            loads.add(n.buffer)
        elif isinstance(n, BufferStore):
            stores.add(n.buffer)
    visit(body, fn)
    return loads, stores


class _Compiled:
    """A kernel compiled to Python: `factory(*buffers, oob, *helpers)` returns the thread
    function `thread(bx, by, bz, tx, ty, tz)`, a generator that yields at each barrier and
    warp shuffle (a plain function when the kernel has neither)."""

    def __init__(self, kernel):
        loads, stores = _accesses(kernel.body)
        local = {a.buffer for a in _allocs(kernel.body)}
        shared = tuple(kernel.shared)
        globals_ = tuple(b for b in kernel.params if b not in shared)
        unknown = (loads | stores) - local - set(shared) - set(globals_)
        if unknown:
            names = ", ".join(sorted(b.name for b in unknown))
            raise ValueError(f"kernel {kernel.name} accesses {names}, which is neither a "
                             "parameter, a shared buffer nor allocated in its body")
        # which buffers need checks: shared ones, and global ones the kernel writes
        self.buffers = globals_ + shared
        self.checked = [b for b in self.buffers if b in shared or b in stores]
        g = _KernelGen(kernel, {b: k for k, b in enumerate(self.checked)}, set(self.buffers))
        args = [g.name(b) for b in self.buffers] + ["_oob"]
        args += [f"_{op}{k}" for k in range(len(self.checked)) for op in ("ld", "st")]
        fname = _identifier(kernel.name) + "factory"
        g.emit(0, f"# {kernel.name}: grid {tuple(kernel.grid)}, block {tuple(kernel.block)}")
        g.emit(0, f"def {fname}({', '.join(args)}):")
        g.emit(1, "def _thread(_bx, _by, _bz, _tx, _ty, _tz):")
        g.emit(2, "pass")
        g.stmt(kernel.body, 2)
        g.emit(1, "return _thread")
        self.source = "\n".join(g.lines)
        self.barriers, self.shuffles = g.barriers, g.shuffles
        env = _env(g.types)
        exec(compile(self.source, f"<gpu interpreter {kernel.name}>", "exec"), env)
        self.factory = env[fname]


def _allocs(body):
    out = []
    visit(body, lambda n: out.append(n) if isinstance(n, Allocate) else None)
    return out


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def compile_kernel(kernel) -> _Compiled:
    """The kernel as Python (`.source` to read it), compiled once per Kernel object."""
    c = _CACHE.get(kernel)
    if c is None:
        c = _CACHE[kernel] = _Compiled(kernel)
    return c


# ------------------------------------------------------------------------------ races
class _Launch:
    """The bookkeeping of one kernel launch. Time is cut into epochs: one per barrier
    interval of each block, numbered across the launch. A thread's stamp is
    epoch * threads_per_block + thread, so comparing two stamps says whether the accesses
    were by the same thread, in the same barrier interval, or in the same block.
    `ctx` = [stamp of the running thread, first stamp of this epoch, of this block]."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.tpb = kernel.threads_per_block
        self.ctx = [0, 0, 0]
        self.epoch_block: list[int] = []  # the block (linear index) of every epoch

    def new_epoch(self, block: int, *, first: bool = False):
        self.epoch_block.append(block)
        self.ctx[1] = (len(self.epoch_block) - 1) * self.tpb
        if first:
            self.ctx[2] = self.ctx[1]

    def where(self, stamp) -> tuple:
        """((bx, by, bz), (tx, ty, tz)) of a stamp."""
        block = self.epoch_block[stamp // self.tpb]
        gx, gy, _ = self.kernel.grid
        bx, by, _ = self.kernel.block
        t = stamp % self.tpb
        return ((block % gx, block // gx % gy, block // (gx * gy)),
                (t % bx, t // bx % by, t // (bx * by)))

    def who(self, stamp) -> str:
        block, thread = self.where(stamp)
        return f"thread {thread} of block {block}"

    def race(self, kind, buf, e, me, other):
        k, name = self.kernel.name, f"{buf.name}[{e}]"
        a, b = self.who(me), self.who(other)
        same_block = self.where(me)[0] == self.where(other)[0]
        scope = "shared" if buf.scope == "shared" else "global"
        if kind == "read-after-write":
            what = f"{a} reads {name}, which {b} wrote"
        elif kind == "write-after-read":
            what = f"{a} writes {name}, which {b} read"
        else:
            what = f"{a} and {b} both write {name} (different values)"
        if same_block:
            what += " in the same barrier interval"
            first, then = {"read-after-write": ("the write", "the read"),
                           "write-after-read": ("the read", "the write"),
                           "write-write": ("the two writes", "")}[kind]
            advice = (f"a __syncthreads() is missing between {first} and {then}" if then else
                      "if a loop the element's index does not depend on (a reduction) is "
                      "bound to threadIdx, bind a spatial loop instead / use cross-thread "
                      "reduction; otherwise give each element one writer (e.g. bind the copy "
                      "loop of a shared tile to threadIdx) or order the writes with a "
                      "__syncthreads()")
        else:
            what += " in the same launch (blocks never synchronize within a kernel)"
            advice = ("a loop that the element's index does not depend on (a reduction) is "
                      "bound to blockIdx/threadIdx: bind a spatial loop instead / use "
                      "cross-thread reduction (a threadIdx-bound reduction loop, or rfactor), "
                      "or split the work into two kernels")
        raise GpuRaceError(f"kernel {k}: {kind} race on {scope} buffer {buf.name}, element "
                           f"{e}: {what}; {advice}", kernel=k, kind=kind, buffer=buf.name,
                           index=e, threads=(self.where(me), self.where(other)))

    def out_of_bounds(self, buf, e):
        name = buf if isinstance(buf, str) else buf.name
        raise IndexError(f"kernel {self.kernel.name}: {self.who(self.ctx[0])} accesses "
                         f"{name}[{e}], outside the buffer")

    def note(self, err: Exception):
        """Say which kernel and thread an error inside thread code came from."""
        if not isinstance(err, GpuSyncError) and hasattr(err, "add_note"):
            err.add_note(f"in kernel {self.kernel.name}, {self.who(self.ctx[0])}")


def _same(arr, e, v) -> bool:
    """Would storing v at arr[e] leave it unchanged? (Such writes cannot race.)"""
    old, new = arr[e], arr.dtype.type(v)
    return bool(old == new) or (old != old and new != new)


def _checked_access(L: _Launch, buf, arr, *, blocks: bool):
    """(load, store) helpers for a flat array with race checks. Per element: the stamp of
    its writer, of its last reader and of another reader in that reader's epoch (W, R, RM);
    for global buffers (`blocks`) also its first reader (RF), to see readers in earlier
    blocks. An access conflicts with another thread's stamp x when x is in this epoch, or,
    for global buffers, in an earlier block. Writes that store the value already there
    (redundant copies, every thread filling the same tile) cannot race and are allowed."""
    n, ctx = arr.size, L.ctx
    W, R, RM = [-1] * n, [-1] * n, [-1] * n
    RF = [-1] * n if blocks else None
    multi: dict = {}  # element -> (epoch start, stamps that rewrote the same value)

    def conflict(x, s, b, bb):
        return x >= 0 and x != s and (x >= b or (blocks and x < bb))

    def ld(e):
        if not 0 <= e < n:
            L.out_of_bounds(buf, e)
        s, b, bb = ctx
        w = W[e]
        if w != s and w >= 0 and (w >= b or (blocks and w < bb)):  # conflict(), inlined
            m = multi.get(e)
            if m is None or m[0] != b or s not in m[1]:
                L.race("read-after-write", buf, e, s, w)
        r = R[e]
        if r != s:
            if r >= b:
                RM[e] = r
            R[e] = s
        if blocks and RF[e] < 0:
            RF[e] = s
        return arr[e]

    def st(e, v):
        if not 0 <= e < n:
            L.out_of_bounds(buf, e)
        s, b, bb = ctx
        w = W[e]
        if conflict(w, s, b, bb):
            if not _same(arr, e, v):
                L.race("write-write", buf, e, s, w)
            m = multi.get(e)
            if m is None or m[0] != b:
                m = multi[e] = (b, {w})
            m[1].add(s)
            return
        r = R[e]
        other = -1
        if r >= b:
            other = r if r != s else RM[e]
            other = other if other >= b else -1
        if blocks and other < 0 and 0 <= RF[e] < bb:
            other = RF[e]
        if other >= 0 and not _same(arr, e, v):
            L.race("write-after-read", buf, e, s, other)
        W[e] = s
        arr[e] = v

    return ld, st


# ------------------------------------------------------------------------------ running
def _blocks(dims):
    x, y, z = dims
    return [(i, j, k) for k in range(z) for j in range(y) for i in range(x)]


def _fill(b):
    return np.nan if dt.is_float(b.dtype) else -12345


def _new_array(b):
    return np.full(b.size, _fill(b), dtype=numpy_type(dt.numpy_name(b.dtype)))


def run_kernel(kernel, memory: dict) -> None:
    """One launch of `kernel`; `memory` maps each global buffer to its flat array."""
    c = compile_kernel(kernel)
    L = _Launch(kernel)
    helpers_global = {}
    for b in c.checked:
        if b.scope != "shared":
            if b not in memory:
                raise ValueError(f"kernel {kernel.name}: no array for global buffer {b.name}")
            helpers_global[b] = _checked_access(L, b, memory[b], blocks=True)
    threads = _blocks(kernel.block)
    for bi, (bx, by, bz) in enumerate(_blocks(kernel.grid)):
        arrays = {b: memory[b] for b in c.buffers if b.scope != "shared"}
        helpers = dict(helpers_global)
        for b in kernel.shared:
            arrays[b] = _new_array(b)
            helpers[b] = _checked_access(L, b, arrays[b], blocks=False)
        thread = c.factory(*(arrays[b] for b in c.buffers), L.out_of_bounds,
                           *itertools.chain.from_iterable(helpers[b] for b in c.checked))
        L.new_epoch(bi, first=True)
        try:
            if not c.barriers and not c.shuffles:
                for t, (tx, ty, tz) in enumerate(threads):
                    L.ctx[0] = L.ctx[1] + t
                    thread(bx, by, bz, tx, ty, tz)
            else:
                _run_block(L, c, [thread(bx, by, bz, tx, ty, tz) for tx, ty, tz in threads])
        except Exception as e:
            L.note(e)
            raise


def _run_block(L: _Launch, c: _Compiled, gens) -> None:
    """Advance every thread to its next barrier, release them together, until all end. On
    the way, a warp whose lanes all wait at one shuffle exchanges values and runs on."""
    ctx = L.ctx
    while True:
        at: dict = {}  # barrier -> threads waiting there
        done = []
        base = ctx[1]
        ready = [(t, None) for t in range(len(gens))]  # (thread, value to send it)
        while ready:
            lanes = {}  # thread -> the shuffle it waits at: (number, value, delta, width)
            for t, v in ready:
                ctx[0] = base + t
                try:
                    y = gens[t].send(v)
                except StopIteration:
                    done.append(t)
                    continue
                if y.__class__ is int:
                    at.setdefault(y, []).append(t)
                else:
                    lanes[t] = y
            ready = _shuffle(L, c, lanes, at, done, len(gens)) if lanes else ()
        if not at:
            return
        if done or len(at) > 1:
            _diverged(L, c, at, done, base)
        L.new_epoch(L.epoch_block[-1])


def _shuffle(L, c, lanes, at, done, n) -> list:
    """The values the lanes waiting at shuffles read, as (thread, value), warp by warp: lane
    l reads lane l + delta of its group of `width` lanes, or keeps its own value past the
    group's end (__shfl_down_sync). A warp not all of whose lanes wait at the same shuffle
    is an error; a lane past the block's last thread (a partial warp) reads garbage."""
    out = []
    for w in sorted({t // WARP for t in lanes}):
        first, end = w * WARP, min(w * WARP + WARP, n)
        sites = {lanes[t][0] if t in lanes else None for t in range(first, end)}
        if len(sites) > 1 or None in sites:
            _diverged_warp(L, c, range(first, end), lanes, at, done)
        for t in range(first, end):
            _, v, delta, width = lanes[t]
            src = t + delta
            if (t - first) % width + delta >= width:
                src = t
            out.append((t, lanes[src][1] if src < end else _garbage(v)))
    return out


def _garbage(v):
    return v.__class__(np.nan if isinstance(v, (float, np.inexact)) else -12345)


def _diverged_warp(L, c, warp, lanes, at, done):
    where = {t: c.shuffles[lanes[t][0]] for t in warp if t in lanes}
    where.update((t, c.barriers[k]) for k, ts in at.items() for t in ts if t in warp)
    where.update((t, "the end of the kernel") for t in done if t in warp)
    groups: dict = {}
    for t in warp:
        groups.setdefault(where[t], []).append(t)
    base = L.ctx[1]
    parts = [f"{len(ts)} lane(s) (first thread {L.where(base + ts[0])[1]}) at {what}"
             for what, ts in groups.items()]
    block, _ = L.where(base)
    k = L.kernel.name
    raise GpuBarrierError(f"kernel {k}: divergent warp shuffle in block {block}, warp "
                          f"{warp[0] // WARP}: {'; '.join(parts)}; {_SHUFFLE_ADVICE}",
                          kernel=k, kind="divergent shuffle")


def _diverged(L, c, at, done, base):
    groups = [(c.barriers[k], ts) for k, ts in sorted(at.items())]
    if done:
        groups.append(("the end of the kernel", done))
    parts = []
    for what, ts in groups:
        _, first = L.where(base + ts[0])
        parts.append(f"{len(ts)} thread(s) (first {first}) at {what}")
    block, _ = L.where(base)
    k = L.kernel.name
    raise GpuBarrierError(f"kernel {k}: divergent barrier in block {block}: "
                          f"{'; '.join(parts)}; {_BARRIER_ADVICE}",
                          kernel=k, kind="divergent barrier")


def run_program(program, *arrays) -> None:
    """Run a GpuProgram on numpy arrays (argument order = program.func.params), outputs in
    place: its kernels in order, every thread block of each, the threads of a block in step
    between barriers. Raises GpuRaceError / GpuBarrierError (both GpuSyncError) for
    programs whose result would depend on thread timing."""
    params = program.func.params
    if len(arrays) != len(params):
        raise ValueError(f"{program.func.name} takes {len(params)} arrays, got {len(arrays)}")
    memory, copies = {}, []
    for b, a in zip(params, arrays):
        a = np.asarray(a)
        if a.size != b.size:
            raise ValueError(f"argument {b.name}: expected {b.size} elements {b.shape}, "
                             f"got {a.shape}")
        flat = a.reshape(-1)
        if not np.may_share_memory(flat, a) and a.flags.writeable:
            copies.append((a, flat))  # reshape had to copy (e.g. a transposed array)
        memory[b] = flat
    for b in program.intermediates:
        memory[b] = _new_array(b)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for kernel in program.kernels:
            run_kernel(kernel, memory)
    for a, flat in copies:
        a[...] = flat.reshape(a.shape)


# How a PrimFunc bound to GPU threads becomes a program of kernels: GPU lowering, which
# lives above this layer (codegen.gpu registers it when imported, as `import looptune` does).
_GPU_LOWERING: list = []


def set_gpu_lowering(lower) -> None:
    """Register `lower(func, lowered: bool) -> GpuProgram` for run_gpu (codegen.gpu does)."""
    _GPU_LOWERING[:] = [lower]


def run_gpu(func, *arrays) -> None:
    """Run a GpuProgram (anything with `kernels` and `intermediates`), or a PrimFunc bound to
    GPU threads (lowered first by the registered GPU lowering)."""
    if isinstance(func, PrimFunc):
        if not _GPU_LOWERING:
            raise RuntimeError("running a GPU-bound PrimFunc needs GPU lowering: import "
                               "looptune.codegen.gpu (importing looptune does)")
        lowered = func.root is None and not find_stmts(func.body, BlockRealize)
        func = _GPU_LOWERING[0](func, lowered)
    elif not hasattr(func, "kernels"):
        raise TypeError(f"the interpreter runs a PrimFunc or a GpuProgram, not {type(func).__name__}")
    run_program(func, *arrays)


__all__ = ["GpuBarrierError", "GpuRaceError", "GpuSyncError", "compile_kernel", "run_gpu",
           "run_kernel", "run_program", "set_gpu_lowering"]
