"""Aligned argument arrays (pure Python)."""
from __future__ import annotations

import numpy as np

from looptune.runtime import aligned, empty, random_args
from looptune.runtime.module import ArgInfo


def test_empty_and_aligned_start_on_64_bytes():
    for shape, dtype in [((3, 5), "float32"), ((7,), "float64"), ((2, 3, 4), "int32")]:
        a = empty(shape, dtype)
        assert a.shape == shape and a.dtype == np.dtype(dtype)
        assert a.ctypes.data % 64 == 0 and a.flags.c_contiguous
    x = np.arange(40, dtype="float32")[1:33]  # 4 bytes past an aligned start
    y = aligned(x)
    assert y.ctypes.data % 64 == 0 and np.array_equal(x, y)
    assert aligned(y) is y


def test_random_args_are_seeded_aligned_and_mark_outputs():
    info = [ArgInfo("A", (4, 6), "float32", False), ArgInfo("n", (5,), "int32", False),
            ArgInfo("C", (4, 4), "float32", True)]
    a1, a2 = random_args(info, 3), random_args(info, 3)
    for x, y in zip(a1, a2):
        assert x.ctypes.data % 64 == 0
        np.testing.assert_array_equal(x, y)
    assert np.isnan(a1[2]).all()
    assert not np.array_equal(random_args(info, 4)[0], a1[0])
    assert (np.abs(a1[0]) <= 1).all() and (a1[1] >= -8).all() and (a1[1] < 8).all()


def test_placer_puts_copies_at_the_asked_offsets():
    from looptune.runtime.ndarray import NUMPY_OFFSETS, Placer, rotated_offsets

    arrays = [np.arange(10, dtype="float32"), np.ones((3, 4), "float64"), np.arange(5)]
    placer = Placer(arrays)
    for r in range(5):
        offs = rotated_offsets(NUMPY_OFFSETS, len(arrays), r)
        assert offs == tuple(NUMPY_OFFSETS[(r + i) % 4] for i in range(3))
        views = placer.at(offs)
        for v, a, off in zip(views, arrays, offs):
            assert v.ctypes.data % 64 == off and v.shape == a.shape and v.dtype == a.dtype
            np.testing.assert_array_equal(v, a)
    assert len({rotated_offsets(NUMPY_OFFSETS, 3, r) for r in range(4)}) == 4


def test_evaluator_config_keeps_its_offsets_through_json():
    from looptune.tune.runner import EvaluatorConfig

    cfg = EvaluatorConfig(num_threads=1)
    assert cfg.arg_offsets == (0, 16, 32, 48)
    assert EvaluatorConfig.from_json(cfg.to_json()) == cfg
    assert EvaluatorConfig.from_json({"num_threads": 1}).arg_offsets is None  # older records
    assert EvaluatorConfig(arg_offsets=[16]).arg_offsets == (16,)
