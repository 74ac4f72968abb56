"""Hand-written GPU schedules of matmul, conv2d, softmax, layer_norm and a row reduction,
run thread by thread by the interpreter (no GPU needed) and checked against numpy; and what
the interpreter reports when a barrier is missing."""
from __future__ import annotations

import numpy as np
import pytest

import gpu_schedules as gs
from looptune.codegen.gpu import lower_gpu
from looptune.tir import interpreter

CASES = {
    "matmul": (gs.shared_matmul, "matmul", dict(M=32, N=32, K=32)),
    "matmul_not_cooperative": (lambda: gs.shared_matmul(M=16, N=16, K=16, tile=4, k_tile=4,
                                                        cooperative=False),
                               "matmul", dict(M=16, N=16, K=16)),
    "conv2d": (gs.conv2d, "conv2d", dict(N=1, C=3, H=7, W=6, K=4, R=3, S=3, stride=1, pad=1,
                                         dilation=1)),
    "softmax": (gs.softmax, "softmax", dict(M=5, N=11)),
    "layer_norm": (gs.layer_norm, "layer_norm", dict(M=4, N=13)),
    "reduce_sum": (gs.row_reduce, "reduce_sum", dict(M=7, N=13)),
}


def _inputs(tensors, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in tensors[:-1]]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_gpu_schedule_matches_numpy_thread_by_thread(case):
    make, name, shape = CASES[case]
    _, tensors, reference = gs.func_of(name, **shape)
    sch = make()
    inputs = _inputs(tensors)
    out = np.full(tensors[-1].shape, np.nan, dtype=tensors[-1].dtype)
    interpreter.run(sch.func, *inputs, out)
    np.testing.assert_allclose(out, reference(*inputs), rtol=1e-5, atol=1e-5)


def _without_barriers(program):
    """`program` with every __syncthreads() removed."""
    import dataclasses

    from looptune.tir.functor import map_children
    from looptune.tir.stmt import is_barrier, seq

    def strip(s):
        if is_barrier(s):
            return seq()
        return map_children(s, strip)
    kernels = tuple(dataclasses.replace(k, body=strip(k.body)) for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels)


@pytest.mark.parametrize("case,buffer", [("matmul", "[AB]_shared"),
                                         ("softmax", "softmax_max_red_shared")])
def test_a_missing_barrier_is_caught_as_a_race_on_the_shared_buffer(case, buffer):
    from looptune.tir.interpreter_gpu import GpuRaceError, run_program
    make, name, shape = CASES[case]
    _, tensors, _ = gs.func_of(name, **shape)
    program = _without_barriers(lower_gpu(make().func, vectorize=False))
    out = np.zeros(tensors[-1].shape, dtype=tensors[-1].dtype)
    with pytest.raises(GpuRaceError, match=f"(?s){buffer}.*__syncthreads"):
        run_program(program, *_inputs(tensors), out)
