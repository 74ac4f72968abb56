"""Bad tensor expressions fail at definition time with one error type (te.TEError) and a
message that names what is wrong; checked for the te core and for the operator library."""
import contextlib

import numpy as np
import pytest

from looptune import te
from looptune.te import ops


def ph(*shape, name="A", dtype="float32"):
    return te.placeholder(shape, dtype, name=name)


@contextlib.contextmanager
def raises(*words):
    """pytest.raises(te.TEError) whose message must contain every word (case-insensitive)."""
    with pytest.raises(te.TEError) as info:
        yield info
    msg = str(info.value).lower()
    missing = [w for w in words if w.lower() not in msg]
    assert not missing, f"message {msg!r} lacks {missing}"


# ----------------------------------------------------------------------------- te core
def test_wrong_number_of_indices():
    A = ph(3, 4)
    with raises("A", "2 dimension", "indexed with 1"):
        te.compute((3,), lambda i: A[i], name="B")


def test_unknown_dtype_in_placeholder():
    with raises("placeholder X", "unknown dtype", "float31", "float32"):
        te.placeholder((3,), "float31", name="X")


def test_bad_shapes_in_placeholder():
    with raises("placeholder X", ">= 1"):
        te.placeholder((3, 0), name="X")
    with raises("placeholder X", "tuple of ints"):
        te.placeholder((3, "n"), name="X")


def test_float_index():
    A = ph(5)
    with raises("tensor A", "float32", "indices must be integers"):
        te.compute((5,), lambda i: A[i * 0.5], name="B")
    with raises("tensor A", "indices must be integers"):
        A[1.5]


def test_constant_index_out_of_range():
    with raises("tensor A", "out of range", "extent 5"):
        ph(5)[5]


def test_reduce_axis_used_outside_its_reduction():
    A = ph(3, 4)
    k = te.reduce_axis(4, "k")
    with raises("compute B", "k", "not axes of this compute", "reduce_axis"):
        te.compute((3,), lambda i: A[i, k], name="B")


def test_reduce_axis_used_in_another_compute():
    A = ph(3, 4)
    k = te.reduce_axis(4, "k")
    te.compute((3,), lambda i: te.sum(A[i, k], axis=k), name="B")
    with raises("compute C", "k", "in the same compute"):
        te.compute((3, 4), lambda i, j: A[i, j] + A[i, k], name="C")


def test_reduction_not_outermost():
    A = ph(3, 4)
    k = te.reduce_axis(4, "k")
    with raises("compute B", "outermost", "separate te.compute"):
        te.compute((3,), lambda i: te.sum(A[i, k], axis=k) * 2.0, name="B")
    with raises("nested"):
        te.sum(te.max(A[0, k], axis=k), axis=k)


def test_reduction_axis_errors():
    with raises("reduce_axis k", "empty"):
        te.reduce_axis(0, "k")
    with raises("reduce_axis k", "start at 0"):
        te.reduce_axis((1, 4), "k")
    A = ph(3, 4)
    with raises("not a reduction axis"):
        te.compute((3, 4), lambda i, j: te.sum(A[i, j], axis=j), name="B")
    with raises("te.max needs axis"):
        te.max(A[0, 0])


def test_fcompute_arity_mismatch():
    A = ph(3, 4)
    with raises("compute B", "1 index argument", "[3, 4]", "2 dimension"):
        te.compute((3, 4), lambda i: A[i, 0], name="B")


def test_fcompute_returning_garbage():
    with raises("compute B", "must return an expression"):
        te.compute((3,), lambda i: "x", name="B")


def test_placeholder_missing_from_create_prim_func():
    A = ph(3)
    B = te.compute((3,), lambda i: A[i] + 1.0, name="B")
    with raises("placeholder A", "not passed to create_prim_func"):
        te.create_prim_func([B])
    with raises("listed twice"):
        te.create_prim_func([A, B, B])
    with raises("nothing to compute"):
        te.create_prim_func([A])


def test_integer_true_division_is_refused():
    A = ph(6)
    with pytest.raises((TypeError, te.TEError), match="//"):
        te.compute((3,), lambda i: A[i / 2], name="B")


# ----------------------------------------------------------------------------- operators
def test_matmul_shape_mismatch():
    with raises("matmul", "(4, 5)", "(6, 7)", "inner dimensions 5 and 6"):
        ops.matmul(ph(4, 5), ph(6, 7, name="B"))
    with raises("matmul", "transposed", "inner dimensions 4 and 6"):
        ops.matmul(ph(4, 5), ph(6, 7, name="B"), transpose_a=True)
    with raises("matmul", "B must be 2-D", "(6, 7, 8)"):
        ops.matmul(ph(4, 5), ph(6, 7, 8, name="B"))
    with raises("matmul", "A must be a te.Tensor", "ndarray"):
        ops.matmul(np.zeros((4, 5)), ph(5, 7))


def test_linalg_shape_mismatches():
    with raises("matmul_add", "C is (4, 6)", "A @ B is (4, 7)"):
        ops.matmul_add(ph(4, 5), ph(5, 7, name="B"), ph(4, 6, name="C"))
    with raises("batch_matmul", "batch sizes 2 and 3"):
        ops.batch_matmul(ph(2, 4, 5), ph(3, 5, 6, name="B"))
    with raises("dense", "(2, 5)", "(6, 3)", "5 must match", "6"):
        ops.dense(ph(2, 5, name="X"), ph(6, 3, name="W"))
    with raises("dense", "bias is (4,)", "(3,)"):
        ops.dense(ph(2, 5, name="X"), ph(5, 3, name="W"), ph(4, name="b"))


def test_add_incompatible_broadcast():
    with raises("add", "(3, 4)", "(3, 5)", "4 and 5", "broadcast"):
        ops.add(ph(3, 4), ph(3, 5, name="B"))
    with raises("multiply", "(2, 3)", "(4, 1)", "2 and 4"):
        ops.multiply(ph(2, 3), ph(4, 1, name="B"))


def test_conv_errors():
    with raises("conv2d_nchw", "input channels 3 and 4", "(1, 3, 8, 8)", "(5, 4, 3, 3)"):
        ops.conv2d_nchw(ph(1, 3, 8, 8, name="X"), ph(5, 4, 3, 3, name="W"))
    with raises("conv2d_nchw", "X must be 4-D", "N, C, H, W"):
        ops.conv2d_nchw(ph(3, 8, 8, name="X"), ph(5, 3, 3, 3, name="W"))
    with raises("conv2d_nhwc", "input channels 3 and 8"):
        ops.conv2d_nhwc(ph(1, 8, 8, 3, name="X"), ph(3, 3, 8, 4, name="W"))
    with raises("conv2d_nchw", "window spans 5", "dilation 2", "padded input"):
        ops.conv2d_nchw(ph(1, 3, 4, 8, name="X"), ph(5, 3, 3, 3, name="W"), dilation=2)
    with raises("conv2d_nchw", "stride", ">= 1"):
        ops.conv2d_nchw(ph(1, 3, 8, 8, name="X"), ph(5, 3, 3, 3, name="W"), stride=0)
    with raises("conv2d_nchw", "padding", "pair of ints"):
        ops.conv2d_nchw(ph(1, 3, 8, 8, name="X"), ph(5, 3, 3, 3, name="W"), padding=(1, 2, 3))
    with raises("depthwise_conv2d_nchw", "one filter group per input channel", "4", "3"):
        ops.depthwise_conv2d_nchw(ph(1, 3, 8, 8, name="X"), ph(4, 1, 3, 3, name="W"))


def test_pool_and_pad_errors():
    with raises("max_pool2d", "padding", "half the kernel"):
        ops.max_pool2d(ph(1, 3, 8, 8, name="X"), kernel=3, padding=2)
    with raises("avg_pool2d", "window spans 9"):
        ops.avg_pool2d(ph(1, 3, 8, 8, name="X"), kernel=9)
    with raises("pad", "pad_before", "2 non-negative ints"):
        ops.pad(ph(3, 4), [1])


def test_norm_and_reduction_errors():
    with raises("softmax", "axis 2", "out of range", "(3, 4)"):
        ops.softmax(ph(3, 4), axis=2)
    with raises("layer_norm", "gamma is (5,)", "(4,)"):
        ops.layer_norm(ph(3, 4), ph(5, name="g"))
    with raises("layer_norm", "only the last axis"):
        ops.layer_norm(ph(3, 4), axis=0)
    with raises("reduce_sum", "names an axis twice"):
        ops.reduce_sum(ph(3, 4), axis=(1, -1))
    with raises("reduce_max", "axis 3", "out of range"):
        ops.reduce_max(ph(3, 4), axis=3)
    with raises("reduce_mean", "reduces nothing"):
        ops.reduce_mean(ph(3, 4), axis=())
