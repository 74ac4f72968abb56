"""GPU lowering: a scheduled PrimFunc whose loop nests are bound to blockIdx / threadIdx ->
a GpuProgram. The CPU pipeline does most of the work; what differs is here:

1. reductions bound to threadIdx become cross-thread reductions (cross_thread.py);
2. buffer compaction follows the thread hierarchy (shared tiles per block, registers per
   thread, intermediates between kernels stay global);
3. vthread loops are pushed down to the statements that use them, as unrolled loops inside
   each thread (vthread.py): what the virtual threads share runs once;
4. each top-level loop nest becomes a kernel: its launch shape is the largest extent bound
   to each tag, its shared buffers are hoisted to the kernel's top;
5. barriers go where shared memory is written and then read by other threads (sync.py)."""
from __future__ import annotations

from ...error import BuildError
from ...target import Target
from ...tir.expr import BufferLoad
from ...tir.func import PrimFunc
from ...tir.functor import find_stmts, map_children, visit
from ...tir.stmt import Allocate, BlockRealize, BufferStore, Comment, For, SeqStmt, seq
from ..passes import (accumulation_loops, auto_unroll, compact_buffers, flatten, lower_blocks,
                      lower_intdiv, partition_loops, unroll_explicit, vectorize_loops)
from ..passes.check_index import check_indices
from ..passes.unroll import copied_terms_last, folds_per_copy
from .cross_thread import lower_cross_thread_reductions
from .program import BLOCK_TAGS, THREAD_TAGS, GpuProgram, Kernel
from .sync import insert_barriers
from .vthread import inject_vthreads

_AXES = ("x", "y", "z")


def is_gpu_func(func: PrimFunc) -> bool:
    """Does `func` bind any loop to a GPU thread axis?"""
    return any(lp.kind == "thread_binding" for lp in find_stmts(func.body, For))


def lower_gpu(func: PrimFunc, target="cuda", *, vectorize: bool = True,
              loops: PrimFunc | None = None) -> GpuProgram:
    """`vectorize=False` leaves vectorized loops as loops (for the interpreter). A function
    lowered already (loops only, flat buffers) is only split into kernels. `loops`: the
    function's stage 1 (lower_gpu_loops at the target's vector width), where known."""
    target = Target.create(target)
    if not find_stmts(func.body, BlockRealize):
        return split_kernels(func)
    f = loops if loops is not None else lower_gpu_loops(func, target.vector_bits)
    body = unroll_explicit(partition_loops(f.body), only=folds_per_copy)
    f = flatten(check_indices(f.with_body(body)))  # CUDA reads element 0 for a bad index
    if vectorize:
        body = vectorize_loops(f.body, target.vector_bits)
        f = f.with_body(copied_terms_last(lower_intdiv(body)))
    else:
        f = f.with_body(lower_intdiv(f.body))
    return split_kernels(f)


def lower_gpu_loops(func: PrimFunc, vector_bits: int = 128) -> PrimFunc:
    """Stage 1 of GPU lowering (what codegen.lower_loops gives for a GPU-bound function, and
    what cost-model features read): loops only, cross-thread reductions, buffers compacted
    along the thread hierarchy, virtual threads pushed down, loops to unroll marked."""
    f = lower_cross_thread_reductions(func)
    acc = accumulation_loops(f)
    f = inject_vthreads(compact_buffers(lower_blocks(f), acc, gpu=True))
    return f.with_body(auto_unroll(f.body, vector_bits=vector_bits))


def split_kernels(func: PrimFunc) -> GpuProgram:
    """One kernel per top-level statement of the lowered function."""
    body, intermediates = func.body, []
    while isinstance(body, Allocate):
        intermediates.append(body.buffer)
        body = body.body
    items = body.stmts if isinstance(body, SeqStmt) else (body,)
    kernels, notes = [], []
    for item in items:
        if isinstance(item, Comment):
            notes.append(item)
            continue
        kernels.append(_kernel(func, item, len(kernels), tuple(intermediates), notes))
        notes = []
    if not kernels:
        raise BuildError(f"{func.name}: nothing to run on the GPU")
    return GpuProgram(func, tuple(kernels), tuple(intermediates))


def _kernel(func, item, index, intermediates, notes) -> Kernel:
    loops = find_stmts(item, For)
    bound = [lp for lp in loops if lp.kind == "thread_binding"]
    if not any(lp.thread in BLOCK_TAGS + THREAD_TAGS for lp in bound):
        what = _block_names(item)
        raise BuildError(f"building for cuda is not supported for {func.name} as it is: the "
                         f"loop nest of {what} is not bound to GPU threads; bind its loops "
                         "(sch.bind(loop, 'blockIdx.x') / 'threadIdx.x'), schedule it with "
                         "looptune.dlight.default_schedule, or build with target='cpu'")
    for lp in loops:
        if lp.kind == "parallel":
            raise BuildError(f"{func.name}: loop {lp.loop_var.name} is parallel (a CPU loop kind) "
                             "in a GPU kernel; bind it to blockIdx/threadIdx instead")
    extent = {}
    for lp in bound:
        extent[lp.thread] = max(extent.get(lp.thread, 1), lp.extent)
    grid = tuple(extent.get(f"blockIdx.{a}", 1) for a in _AXES)
    block = tuple(extent.get(f"threadIdx.{a}", 1) for a in _AXES)
    name = f"{func.name}_kernel{index}"
    shared = []

    def hoist(s):
        s = map_children(s, hoist)
        if isinstance(s, Allocate) and s.buffer.scope == "shared":
            if s.buffer not in shared:
                shared.append(s.buffer)
            return s.body
        return s

    kbody = hoist(item)
    if any(b.scope == "global" for b in _allocated(kbody)):
        raise BuildError(f"kernel {name}: a global buffer is allocated inside the kernel; "
                         "keep intermediates between kernels outside the bound loops")
    kbody = insert_barriers(kbody, shared, extent, name)
    used = _buffers(kbody)
    params = tuple(b for b in tuple(func.params) + intermediates if b in used)
    return Kernel(name, seq(*notes, kbody), params, grid, block, tuple(shared))


def _allocated(s):
    return [a.buffer for a in find_stmts(s, Allocate)]


def _buffers(s) -> set:
    out = set()

    def fn(n):
        if isinstance(n, (BufferLoad, BufferStore)):
            out.add(n.buffer)
    visit(s, fn)
    return out


def _block_names(item) -> str:
    stores = sorted({s.buffer.name for s in find_stmts(item, BufferStore)})
    return f"the statement writing {', '.join(stores)}" if stores else "a statement"
