"""Postprocessors: finish and validate sampled schedules."""
from .base import Postproc
from .rewrite_cooperative_fetch import RewriteCooperativeFetch
from .rewrite_layout import RewriteLayout
from .rewrite_parallel_vectorize_unroll import RewriteParallelVectorizeUnroll
from .rewrite_unbound_block import RewriteUnboundBlock
from .verify_cpu import VerifyCPU
from .verify_gpu import VerifyGPUCode

__all__ = ["Postproc", "RewriteCooperativeFetch", "RewriteLayout",
           "RewriteParallelVectorizeUnroll", "RewriteUnboundBlock", "VerifyCPU", "VerifyGPUCode"]
