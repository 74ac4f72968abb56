"""Loop kinds (parallel, vectorize, unroll, bind) and annotations on loops and blocks."""
from __future__ import annotations

from ...tir.functor import collect_realizes, find_stmts
from ...tir.stmt import Block, BlockRealize, For, with_annotation
from ..error import ScheduleError
from ..trace import ExprRV, InstructionKind, instruction, register_instruction
from .common import check_data_parallel

THREAD_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z", "vthread.x", "vthread.y", "vthread.z")


def _set_kind(sch, loop_rv, kind: str, thread=None):
    entry = sch._loop(loop_rv)
    loop = entry.node
    name = loop.loop_var.name
    if loop.kind == kind and loop.thread == thread:
        return []
    if loop.kind != "serial":
        raise ScheduleError(f"loop {name} is already {loop.kind}; a loop has one kind "
                            f"(split it to make it both {loop.kind} and {kind})")
    what = {"parallel": "parallelize", "vectorized": "vectorize",
            "thread_binding": "bind"}.get(kind)
    if what and not (kind == "thread_binding" and thread.startswith("threadIdx")):
        # a reduction loop may be bound to threads: GPU lowering turns it into a
        # cross-thread reduction (partial results in registers, combined through shared memory)
        check_data_parallel(loop, collect_realizes(loop.body), what)
    if kind == "parallel":
        for p in entry.parents:
            if isinstance(p, For) and p.kind == "parallel":
                raise ScheduleError(f"cannot parallelize loop {name}: it is inside parallel loop "
                                    f"{p.loop_var.name}; fuse the two and parallelize the result")
    if kind in ("parallel", "vectorized"):
        for n in find_stmts(loop.body, For):
            if n.kind == "parallel":
                raise ScheduleError(f"cannot {what} loop {name}: it contains parallel loop "
                                    f"{n.loop_var.name}")
    new = For(loop.loop_var, loop.extent, kind, loop.body, thread, loop.annotations)
    sch.state.replace({loop: new})
    return []


@instruction("Parallel", "parallel", inputs=("loop",))
def parallel(sch, inputs, attrs, decision):
    return _set_kind(sch, inputs[0], "parallel")


@instruction("Vectorize", "vectorize", inputs=("loop",))
def vectorize(sch, inputs, attrs, decision):
    return _set_kind(sch, inputs[0], "vectorized")


@instruction("Unroll", "unroll", inputs=("loop",))
def unroll(sch, inputs, attrs, decision):
    return _set_kind(sch, inputs[0], "unrolled")


@instruction("Bind", "bind", inputs=("loop",), attrs=("thread_axis",))
def bind(sch, inputs, attrs, decision):
    axis = attrs[0]
    if axis not in THREAD_AXES:
        raise ScheduleError(f"bind: unknown thread axis {axis!r}; use one of {', '.join(THREAD_AXES)}")
    return _set_kind(sch, inputs[0], "thread_binding", axis)


def _annotated(node, annotations):
    if isinstance(node, For):
        return For(node.loop_var, node.extent, node.kind, node.body, node.thread, annotations)
    b = node.block
    return BlockRealize(node.iter_values, node.predicate,
                        Block(b.name, b.iter_vars, b.reads, b.writes, b.body, b.init,
                              b.alloc_buffers, annotations))


@instruction("Annotate", "annotate", inputs=("block_or_loop", "ann_val"), attrs=("ann_key", "ann_val"))
def annotate(sch, inputs, attrs, decision):
    entry = sch._loop_or_block(inputs[0])
    key = attrs[0]
    if not isinstance(key, str) or not key:
        raise ScheduleError(f"annotate: the key must be a non-empty string, got {key!r}")
    if len(inputs) > 1:
        value = inputs[1]
        value = sch._int(value) if isinstance(value, ExprRV) else value
    else:
        value = attrs[1]
    if not isinstance(value, (int, float, str)) or isinstance(value, bool):
        raise ScheduleError(f"annotate {key}: the value must be an int, float, str or sampled "
                            f"value, got {value!r}")
    node = entry.node
    old = node.annotations if isinstance(node, For) else node.block.annotations
    sch.state.replace({node: _annotated(node, with_annotation(old, key, value))})
    return []


@instruction("Unannotate", "unannotate", inputs=("block_or_loop",), attrs=("ann_key",))
def unannotate(sch, inputs, attrs, decision):
    entry = sch._loop_or_block(inputs[0])
    node = entry.node
    old = node.annotations if isinstance(node, For) else node.block.annotations
    if attrs[0] not in dict(old):
        what = f"loop {node.loop_var.name}" if isinstance(node, For) else f"block {node.block.name}"
        raise ScheduleError(f"unannotate: {what} has no annotation {attrs[0]!r}")
    sch.state.replace({node: _annotated(node, with_annotation(old, attrs[0], None))})
    return []


def _enter_postproc(sch, inputs, attrs, decision):
    return []


register_instruction(InstructionKind("EnterPostproc", "enter_postproc", _enter_postproc,
                                     postproc=True))
