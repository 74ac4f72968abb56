"""Indices loaded from memory follow the framework: negative ones wrap where ONNX (and torch's
x[idx]) wrap them, and out-of-range ones raise at call time - from a te kernel, a compiled
ONNX model and a compiled torch model - instead of clamping or reading out of bounds."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune import te
from looptune.error import IndexRangeError, RunError

pytestmark = pytest.mark.cc
RNG = np.random.default_rng(24)


def rand(*shape):
    return RNG.uniform(-1, 1, shape).astype("float32")


# ------------------------------------------------------------------ te kernels
def gather_rows(n=16, m=8, k=32, *, schedule=False, dtype="int32"):
    """C[i, j] = A[I[i], j]: rows of A picked by the data-dependent I."""
    A = te.placeholder((n, k), name="A")
    Ix = te.placeholder((m,), name="I", dtype=dtype)
    C = te.compute((m, k), lambda i, j: A[Ix[i], j] * 2.0, name="C")
    func = te.create_prim_func([A, Ix, C])
    if not schedule:
        return func
    s = lt.Schedule(func)
    i, j = s.get_loops(s.get_block("C"))
    s.parallel(i)
    s.vectorize(j)
    return s.mod


@pytest.mark.parametrize("schedule", [False, True], ids=["plain", "parallel_vectorized"])
def test_te_gather_in_range_matches_numpy(schedule):
    mod = lt.build(gather_rows(schedule=schedule), target="cpu")
    a, idx = rand(16, 32), RNG.integers(0, 16, 8).astype("int32")
    c = np.empty((8, 32), "float32")
    mod(a, idx, c)
    np.testing.assert_allclose(c, a[idx] * 2, rtol=1e-6)


@pytest.mark.parametrize("schedule", [False, True], ids=["plain", "parallel_vectorized"])
@pytest.mark.parametrize("bad", [16, 1000, -1])
def test_te_gather_out_of_range_raises_naming_kernel_buffer_and_value(schedule, bad):
    mod = lt.build(gather_rows(schedule=schedule), target="cpu")
    a, idx = rand(16, 32), RNG.integers(0, 16, 8).astype("int32")
    idx[5] = bad
    with pytest.raises(IndexRangeError) as e:
        mod(a, idx, np.empty((8, 32), "float32"))
    msg = str(e.value)
    assert f"index {bad} " in msg and "A" in msg and "axis 0" in msg and "size 16" in msg
    assert mod.symbol in msg
    assert isinstance(e.value, RunError) and isinstance(e.value, IndexError)
    assert e.value.value == bad and e.value.buffer == "A"
    # the kernel still works after an error
    c = np.empty((8, 32), "float32")
    idx[5] = 3
    mod(a, idx, c)
    np.testing.assert_allclose(c, a[idx] * 2, rtol=1e-6)


@pytest.mark.parametrize("dtype,bad", [("int8", -128), ("int64", 1 << 40)])
def test_te_gather_reports_the_index_of_any_integer_type_exactly(dtype, bad):
    mod = lt.build(gather_rows(dtype=dtype), target="cpu")
    a, idx = rand(16, 32), RNG.integers(0, 16, 8).astype(dtype)
    c = np.empty((8, 32), "float32")
    mod(a, idx, c)
    np.testing.assert_allclose(c, a[idx] * 2, rtol=1e-6)
    idx[7] = bad
    with pytest.raises(IndexRangeError, match=f"index {bad} is out of range for axis 0 of A"):
        mod(a, idx, c)


def test_te_gather_check_keeps_the_rest_vectorized():
    src = lt.build(gather_rows(schedule=True), target="cpu").source
    assert "lt_check_index(" in src
    assert "lt_float32x" in src  # the j loop is still vector loads and stores


def test_statically_bounded_kernels_carry_no_check():
    n = 64
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    Ix = te.placeholder((n,), name="I", dtype="int32")
    # a data-dependent index that is clamped into range needs no check either
    D = te.compute((n,), lambda i: A[te.max(te.min(Ix[i], n - 1), 0), i], name="D")
    for func in (te.create_prim_func([A, B, C]), te.create_prim_func([A, Ix, D])):
        src = lt.build(func, target="cpu").source
        assert "lt_check_index" not in src and "lt_index_error" not in src


def test_random_test_inputs_are_valid_indices():
    """Tuning and verification call kernels on random inputs: an index input gets values
    inside the axis it indexes (the default integers, [-8, 8), would make a gather of an
    axis of 3 fail)."""
    from looptune.backend.base import args_info
    from looptune.runtime import random_args
    from looptune.tune.tune import verify
    func = gather_rows(n=3)
    info = args_info(func)
    assert [a.index_bound for a in info] == [0, 3, 0]
    idx = random_args(info, 0)[1]
    assert idx.min() >= 0 and idx.max() < 3 and len(set(idx.tolist())) > 1
    assert verify(lt.build(gather_rows(n=3, schedule=True), target="cpu"), func)


def test_time_evaluator_reports_an_index_error_too():
    mod = lt.build(gather_rows(), target="cpu")
    idx = np.full(8, 99, "int32")
    with pytest.raises(IndexRangeError, match="index 99"):
        mod.time_evaluator(number=1, repeat=1)(rand(16, 32), idx, np.empty((8, 32), "float32"))


# ------------------------------------------------------------------ ONNX
def onnx_model(node, data_shape, idx_shape, *, data_const=False, opset=17):
    from onnx import TensorProto as T, helper, numpy_helper
    inputs = [helper.make_tensor_value_info("i", T.INT64, idx_shape)]
    inits = []
    data = rand(*data_shape)
    if data_const:
        inits.append(numpy_helper.from_array(data, "x"))
    else:
        inputs.insert(0, helper.make_tensor_value_info("x", T.FLOAT, data_shape))
    g = helper.make_graph([node], "m", inputs,
                          [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    ops = [helper.make_opsetid("", opset)]
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = helper.find_min_ir_version_for(ops)
    return m, data


def ort_run(m, feeds):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


ONNX_CASES = {
    # name: (operator, attributes, data shape, indices shape, data constant, axis size)
    "gather_axis0_const_table": ("Gather", {"axis": 0}, (10, 6), (3, 4), True, 10),
    "gather_axis0": ("Gather", {"axis": 0}, (10, 6), (3, 4), False, 10),
    "gather_axis1": ("Gather", {"axis": 1}, (4, 7, 3), (5,), False, 7),
    "gather_axis_neg": ("Gather", {"axis": -1}, (4, 5), (2, 3), False, 5),
    "gather_elements": ("GatherElements", {"axis": 1}, (4, 6), (4, 3), False, 6),
    "gather_elements_axis0": ("GatherElements", {"axis": 0}, (5, 3), (2, 3), False, 5),
    "gather_nd": ("GatherND", {}, (5, 5, 3), (2, 3, 2), False, 5),
    "gather_nd_const_data": ("GatherND", {}, (4, 6), (5, 1), True, 4),
    "gather_nd_batch": ("GatherND", {"batch_dims": 1}, (3, 5, 4), (3, 2, 1), False, 5),
}


def _onnx_case(name):
    helper = pytest.importorskip("onnx.helper")
    from looptune.frontend.onnx import from_onnx
    op, attrs, shape, ishape, const, dim = ONNX_CASES[name]
    m, data = onnx_model(helper.make_node(op, ["x", "i"], ["y"], **attrs), shape, ishape,
                         data_const=const)
    return m, data, const, ishape, dim, lt.compile_model(from_onnx(m), target="cpu")


def test_constant_gather_nd_indices_fold_or_are_refused_at_import():
    pytest.importorskip("onnx")
    from onnx import helper, numpy_helper
    from looptune.frontend.common import ImportError_
    from looptune.frontend.onnx import from_onnx
    idx = np.array([[1, -2], [0, 3]], np.int64)
    m, data = onnx_model(helper.make_node("GatherND", ["x", "i"], ["y"]), (4, 5), (2, 2))
    m.graph.input.pop()  # the indices become a constant
    m.graph.initializer.append(numpy_helper.from_array(idx, "i"))
    np.testing.assert_allclose(lt.compile_model(from_onnx(m), target="cpu")(data),
                               ort_run(m, {"x": data}), rtol=1e-6)
    m.graph.initializer[-1].CopyFrom(numpy_helper.from_array(np.array([[1, 5]], np.int64), "i"))
    with pytest.raises(ImportError_, match="GatherND index 5 is out of range for axis 1"):
        from_onnx(m)


@pytest.mark.parametrize("name", sorted(ONNX_CASES))
def test_onnx_runtime_indices_wrap_negative_ones_as_onnx_runtime(name):
    m, data, const, ishape, dim, compiled = _onnx_case(name)
    idx = RNG.integers(-dim, dim, ishape).astype("int64")
    idx.flat[0], idx.flat[-1] = -dim, -1  # both ends of the negative range
    feeds = {"i": idx} if const else {"x": data, "i": idx}
    want = ort_run(m, feeds)
    got = compiled(*feeds.values())
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("name", sorted(ONNX_CASES))
@pytest.mark.parametrize("where", ["above", "below"])
def test_onnx_runtime_out_of_range_indices_raise_as_onnx_runtime(name, where):
    m, data, const, ishape, dim, compiled = _onnx_case(name)
    idx = RNG.integers(0, dim, ishape).astype("int64")
    bad = dim if where == "above" else -dim - 1
    idx.flat[idx.size // 2] = bad
    feeds = {"i": idx} if const else {"x": data, "i": idx}
    with pytest.raises(Exception):  # ONNX Runtime refuses them: so does looptune
        ort_run(m, feeds)
    with pytest.raises(IndexRangeError, match=f"index {bad} is out of range"):
        compiled(*feeds.values())


def test_empty_and_non_onnx_files_get_a_clear_error(tmp_path):
    pytest.importorskip("onnx")
    from looptune.frontend.common import ImportError_
    from looptune.frontend.onnx import from_onnx
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    text = tmp_path / "notes.onnx"
    text.write_text("this is not a model\n" * 20)
    for path in (empty, text):
        with pytest.raises(ImportError_) as e:
            from_onnx(path)
        msg = str(e.value)
        assert str(path) in msg and "opset None" not in msg
        assert "not an ONNX model" in msg or "holds no ONNX model" in msg


# ------------------------------------------------------------------ torch
def _torch_cases():
    torch = pytest.importorskip("torch")
    nn = torch.nn
    from test_frontend_torch import Fn  # a module made of a function and its layers

    x = torch.randn(6, 5)
    return torch, {
        # name: (module, data input or None, index shape, axis size, wraps negatives)
        "embedding": (Fn(lambda s, i: s.mods[0](i), nn.Embedding(9, 4)), None, (2, 3), 9, False),
        "index_select": (Fn(lambda s, x, i: x.index_select(1, i)), x, (4,), 5, False),
        "gather": (Fn(lambda s, x, i: torch.gather(x, 0, i)), x, (3, 5), 6, False),
        "index_tensor": (Fn(lambda s, x, i: x[i]), x, (2, 2), 6, True),
        "index_tensor_axis1": (Fn(lambda s, x, i: x[:, i]), x, (3,), 5, True),
    }


def _torch_compile(name):
    torch, cases = _torch_cases()
    mod, x, shape, dim, wraps = cases[name]
    from looptune.frontend.torch import from_torch
    ex = torch.randint(0, dim, shape)
    args = (ex,) if x is None else (x, ex)
    compiled = lt.compile_model(from_torch(mod, args), target="cpu")
    return torch, mod, x, shape, dim, wraps, compiled


TORCH_NAMES = ["embedding", "index_select", "gather", "index_tensor", "index_tensor_axis1"]


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_torch_indices_match_torch_in_range_and_for_negatives(name):
    torch, mod, x, shape, dim, wraps, compiled = _torch_compile(name)
    idx = torch.randint(0, dim, shape)
    args = (idx,) if x is None else (x, idx)
    got = compiled(*(a.numpy() for a in args))
    np.testing.assert_allclose(got, mod(*args).detach().numpy(), rtol=1e-6)
    idx.view(-1)[0] = -1
    args = (idx,) if x is None else (x, idx)
    if wraps:
        want = mod(*args).detach().numpy()
        np.testing.assert_allclose(compiled(*(a.numpy() for a in args)), want, rtol=1e-6)
    else:
        with pytest.raises((IndexError, RuntimeError)):
            mod(*args)
        with pytest.raises(IndexRangeError, match="index -1 is out of range"):
            compiled(*(a.numpy() for a in args))


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_torch_out_of_range_indices_raise_as_torch(name):
    torch, mod, x, shape, dim, wraps, compiled = _torch_compile(name)
    idx = torch.randint(0, dim, shape)
    idx.view(-1)[-1] = dim + 2
    args = (idx,) if x is None else (x, idx)
    with pytest.raises((IndexError, RuntimeError)):
        mod(*args)
    with pytest.raises(IndexRangeError, match=f"index {dim + 2} is out of range"):
        compiled(*(a.numpy() for a in args))


# ------------------------------------------------------------------ the interpreter, CUDA
def test_interpreter_runs_the_checked_lowering():
    """The reference interpreter runs the scalar lowering (testing/check.py): its checks
    raise IndexError as the kernel does."""
    from looptune.codegen import lower
    from looptune.tir.interpreter import run
    lowered = lower(gather_rows(), vectorize=False)
    a, idx, c = rand(16, 32), RNG.integers(0, 16, 8).astype("int32"), np.empty((8, 32), "float32")
    run(lowered, a, idx, c)
    np.testing.assert_allclose(c, a[idx] * 2, rtol=1e-6)
    idx[0] = -1
    with pytest.raises(IndexError, match="index -1 is out of range for an axis of size 16"):
        run(lowered, a, idx, c)


@pytest.mark.parametrize("wrap", [True, False])
def test_cuda_reads_a_safe_element_for_a_bad_index(wrap):
    """CUDA kernels have no error path (yet): an index out of range reads element 0 instead
    of faulting; in range (and negative where wrapped) they read what they should."""
    from looptune.codegen.cuda import render_cuda
    from looptune.codegen.gpu import lower_gpu
    from looptune.graph.op.gather import read_index
    from looptune.tir.interpreter_gpu import run_program
    A = te.placeholder((16, 32), name="A")
    Ix = te.placeholder((8,), name="I", dtype="int32")
    C = te.compute((8, 32), lambda i, j: A[read_index(Ix[i], 16, wrap), j], name="C")
    s = lt.Schedule(te.create_prim_func([A, Ix, C]))
    i, j = s.get_loops(s.get_block("C"))
    s.bind(i, "blockIdx.x")
    s.bind(j, "threadIdx.x")
    src = render_cuda(lower_gpu(s.func))
    assert "lt_safe_index(I[i], " in src and f", {int(wrap)})" in src
    prog = lower_gpu(s.func, vectorize=False)
    a, idx, c = rand(16, 32), RNG.integers(-16 if wrap else 0, 16, 8).astype("int32"), \
        np.empty((8, 32), "float32")
    run_program(prog, a, idx, c)
    np.testing.assert_allclose(c, a[idx], rtol=1e-6)
