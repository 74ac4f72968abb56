"""Differential tests: random valid schedules of every operator give numpy's answer, both in
the reference interpreter (pure Python) and compiled with the C compiler."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune.codegen import lower
from looptune.tir import interpreter
from looptune.testing import random_schedule
from workloads_small import SMALL, all_names, small_workload


def test_every_operator_has_a_small_shape():
    missing = set(all_names()) - set(SMALL)
    assert not missing, f"add small shapes for {sorted(missing)} to tests/workloads_small.py"


def _run_interp(func, inputs, out_spec):
    shape, dtype = out_spec
    out = np.full(shape, np.nan, dtype=dtype)
    interpreter.run(func, *inputs, out)
    return out


@pytest.mark.parametrize("name", all_names())
def test_random_schedules_interpreted(name):
    func, inputs, expected, out_spec = small_workload(name)
    for seed in range(3):
        sch = random_schedule(func, seed)
        got = _run_interp(sch.func, inputs, out_spec)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name} seed {seed}\n{sch.trace}")
        low = lower(sch.func, vectorize=False)
        got = _run_interp(low, inputs, out_spec)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name} seed {seed} (lowered)\n{sch.trace}")


@pytest.mark.cc
@pytest.mark.parametrize("name", all_names())
def test_random_schedules_compiled(name):
    func, inputs, expected, (shape, dtype) = small_workload(name)
    for seed in range(8):
        sch = random_schedule(func, 100 + seed)
        mod = lt.build(sch)
        out = np.full(shape, np.nan, dtype=dtype)
        mod(*inputs, out)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name} seed {100 + seed}\n{sch.trace}\n{mod.source}")


@pytest.mark.cc
@pytest.mark.parametrize("name", all_names())
def test_unscheduled_compiled(name):
    func, inputs, expected, (shape, dtype) = small_workload(name)
    out = np.full(shape, np.nan, dtype=dtype)
    lt.build(func)(*inputs, out)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", all_names())
def test_random_block_schedules_interpreted(name):
    from looptune.testing import random_block_schedule
    func, inputs, expected, out_spec = small_workload(name)
    for seed in range(4):
        sch = random_block_schedule(func, seed)
        got = _run_interp(lower(sch.func, vectorize=False), inputs, out_spec)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name} seed {seed}\n{sch.trace}")


@pytest.mark.cc
@pytest.mark.parametrize("name", all_names())
def test_random_block_schedules_compiled(name):
    from looptune.testing import random_block_schedule
    func, inputs, expected, (shape, dtype) = small_workload(name)
    for seed in range(8):
        sch = random_block_schedule(func, 200 + seed)
        mod = lt.build(sch)
        out = np.full(shape, np.nan, dtype=dtype)
        mod(*inputs, out)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name} seed {200 + seed}\n{sch.trace}\n{mod.source}")
