"""looptune.dlight: default schedules with zero search, in the spirit of TVM's DLight. A
model's tasks without a tuning record get one (compile_model), and a kernel can be built for a
GPU without tuning: `lt.build(default_schedule(func, "cuda"), "cuda")`.

`default_schedule(func, target)` tries the rules of the target's kind in order
(base.DEFAULT_RULES) and returns the first schedule one makes. Each rule looks at the whole
function after inlining its elementwise stages; every step is a schedule primitive that checks
itself, and a rule whose step does not apply gives up (None or ScheduleError) for the next,
so the result is always a valid schedule. The last rule applies to anything.

CPU ("cpu-default", cpu.py): register tiles of 8 vector accumulators for matmul and
convolution, rfactored vector partials for reductions along the innermost loop, vectorized
innermost and parallel outer loops elsewhere, constant weights packed as the tiles read them.

CUDA (gpu/, in this order):

- gpu-matmul: one reduction with data reuse whose inputs are indexed by plain loop variables
  (matmul, batch_matmul, dense, with an elementwise epilogue; a vector times a (K, N)
  matrix). Output tiles per thread block (up to 64x64: 16x16 threads on threadIdx.x, each
  accumulating a 4x4 tile in registers), the reduction in steps of up to 16 over which each
  input's tile is staged in shared memory, fetched cooperatively by all the block's threads
  (the copy's loops fused and spread over the same threadIdx.x as the computation: loops
  with one thread tag share the hardware index); the epilogue is applied as each thread
  writes its tile back. Large matrices (enough 128 x 128 tiles for twice the
  multiprocessors) get 2 x 2 virtual threads: 8 x 8 outputs a thread, A's tile rows padded
  against bank conflicts. Smaller tiles for small extents and while there are fewer thread
  blocks than multiprocessors; a short i gives its threads to j.
- gpu-conv: one reduction with data reuse that reads an input through a window
  (convolutions, NCHW or NHWC, depthwise, strided, dilated, with an elementwise epilogue).
  A thread per output pixel (threads along x, then y, then output channels, up to 256),
  each accumulating 4 output channels in registers from every input value it loads; the
  input channels in steps of up to 8, over which the padded input window is computed
  straight into shared memory (the padding stage is not inlined but computed tile by tile)
  and the weights are staged there, both fetched cooperatively. Smaller tiles while there
  are fewer thread blocks than multiprocessors.
- gpu-reduction: a single streaming reduction (some input read once per point of the
  iteration domain: row sum / max / mean, a (N, K) matrix times a vector) that is at least
  a warp long or longer than its number of rows. A thread block per row (several rows per
  block along threadIdx.y when rows are short); the reduction split with its inner part on
  threadIdx.x, which GPU lowering makes a cross-thread reduction (per-thread partials
  combined by warp shuffles, or through shared memory). Elementwise consumers of the rows join the row's block.
- gpu-general-reduction: several reductions and elementwise stages over the same rows
  (softmax, layer_norm, logsumexp). The whole row in one thread block: the last stage's row
  loops on blockIdx.x, its other loops spread over threadIdx.x, every earlier stage computed
  at the row (compute_at) and spread over the same threads, reductions across threads. A
  row is read from global memory once per stage; the per-row intermediates live in shared
  memory.
- gpu-elementwise: only spatial stages (elementwise, broadcast, transpose, padding): each
  stage's loops fused and split by 256 threads (the extent itself when smaller; a tail is
  guarded).
- gpu-fallback: anything: each stage's leading spatial loops fused and bound to
  blockIdx.x / threadIdx.x, its reduction loops serial in each thread, accumulating in a
  register (pooling, short reductions over many rows, reductions over a strided axis with
  many outputs, which a thread per output reads coalesced).

Every GPU rule binds whatever stage it did not schedule itself as the fallback does, so each
loop nest of the result is bound to blockIdx / threadIdx.
"""
from __future__ import annotations

from ..schedule import Schedule, ScheduleError
from ..target import Target
from . import cpu, gpu  # noqa: F401  (registers the rules)
from .base import DEFAULT_RULES, Rule, rules_for


def apply_rules(func, target="cpu", *, rules=None) -> tuple:
    """(the Rule that applied, its Schedule of `func`, a PrimFunc or a Schedule to continue).
    `rules`: names or Rule instances to try instead of the target kind's defaults."""
    target = Target.create(target)
    candidates = rules_for(target) if rules is None else [Rule.create(r) for r in rules]
    failures = []
    for rule in candidates:
        try:
            sch = rule.apply(func, target)
        except ScheduleError as e:
            failures.append(f"{rule.name}: {e}")
            continue
        if sch is not None:
            return rule, sch
    name = getattr(func, "name", None) or getattr(getattr(func, "func", None), "name", "?")
    raise ScheduleError(f"no default schedule rule applies to {name} on {target}"
                        + "".join(f"\n  {f}" for f in failures))


def default_schedule(func, target="cpu", *, rules=None) -> Schedule:
    """A schedule of `func` (a PrimFunc, or a Schedule to continue from) for `target`, with
    no search: the first of the target's rules that applies."""
    return apply_rules(func, target, rules=rules)[1]


__all__ = ["DEFAULT_RULES", "Rule", "apply_rules", "default_schedule", "rules_for"]
