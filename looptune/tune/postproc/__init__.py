"""Postprocessors: finish and validate sampled schedules."""
from .base import Postproc
from .rewrite_layout import RewriteLayout
from .rewrite_parallel_vectorize_unroll import RewriteParallelVectorizeUnroll
from .verify_cpu import VerifyCPU

__all__ = ["Postproc", "RewriteLayout", "RewriteParallelVectorizeUnroll", "VerifyCPU"]
