"""RewriteUnboundBlock: bind every loop nest still running on the host to GPU threads (as
AutoBind does, with a fixed thread count), so each becomes a kernel: the stages no rule
scheduled, such as a consumer that multi-level tiling or cross-thread reduction did not
fuse."""
from __future__ import annotations

from ...codegen.gpu.program import BLOCK_TAGS, THREAD_TAGS
from ...tir.functor import collect_realizes, find_stmts
from ...tir.stmt import For, SeqStmt
from ..schedule_rule.auto_bind import bind_block_threads, max_threads_of
from .base import Postproc


def top_level_nests(func) -> list:
    """The statements of the root block: one kernel each once bound."""
    body = func.root.body
    return list(body.stmts) if isinstance(body, SeqStmt) else [body]


def unbound_nests(func) -> list:
    """The top-level statements of `func` with no loop bound to blockIdx / threadIdx, each as
    the names of the blocks in it."""
    out = []
    for s in top_level_nests(func):
        if any(lp.kind == "thread_binding" and lp.thread in BLOCK_TAGS + THREAD_TAGS
               for lp in find_stmts(s, For)):
            continue
        names = [br.block.name for br in collect_realizes(s)]
        if names:
            out.append(names)
    return out


@Postproc.registry.register("rewrite-unbound-block")
class RewriteUnboundBlock(Postproc):
    """max_threads None: the target's max threads per block."""

    def __init__(self, max_threads: int | None = None, max_blocks: int = 256):
        self.max_threads = max_threads
        self.max_blocks = max_blocks

    def initialize_with_tune_context(self, context) -> None:
        if self.max_threads is None:
            self.max_threads = max_threads_of(context.target)

    def apply(self, sch) -> bool:
        limit = self.max_threads or 1024
        for names in unbound_nests(sch.func):
            block = sch.get_block(names[0])
            bind_block_threads(sch, block, lambda extent: (min(extent, limit),) * 2,
                               self.max_blocks)
        return True
