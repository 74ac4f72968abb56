"""`looptune inspect`: a model's operators, every unsupported one at once, and its tasks,
without compiling."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from looptune.cli import main  # noqa: E402

F = TensorProto.FLOAT


def save(tmp_path, nodes, inits, out_shape, name="m.onnx"):
    g = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", F, (1, 4, 8, 8))],
        [helper.make_tensor_value_info("y", F, out_shape)],
        [numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / name
    onnx.save(m, str(path))
    return str(path)


def conv_relu(tmp_path, extra=()):
    w = np.random.default_rng(0).uniform(-1, 1, (8, 4, 3, 3))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r" if extra else "y"])] + list(extra)
    return save(tmp_path, nodes, {"w": w}, (1, 8, 8, 8))


def test_inspect_lists_operators_and_tasks_of_a_model_that_imports(tmp_path, capsys):
    assert main(["inspect", conv_relu(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "ONNX opset 17, 2 nodes, 2 operators" in out
    assert "Conv" in out and "Relu" in out and "NO" not in out
    assert "distinct tasks" in out and "fused_conv2d_relu" in out
    # 8 x 4 x 3 x 3 x 64 multiply-adds and 512 relus
    assert "total 0.0374 MFLOP per inference" in out


def test_inspect_names_every_unsupported_operator_at_once(tmp_path, capsys):
    extra = [helper.make_node("Hardmax", ["r"], ["h1"]),
             helper.make_node("Hardmax", ["h1"], ["h2"]),
             helper.make_node("LpNormalization", ["h2"], ["y"])]
    assert main(["inspect", conv_relu(tmp_path, extra)]) == 1
    out = capsys.readouterr().out
    assert "2 operator(s) unsupported" in out
    assert "Hardmax x2" in out and "LpNormalization x1" in out
    lines = {ln.split()[0]: ln for ln in out.splitlines()  # the table's rows
             if ln.startswith("  ") and ln.rstrip().endswith(("yes", "NO"))}
    assert lines["Hardmax"].rstrip().endswith("NO") and lines["Conv"].rstrip().endswith("yes")


def test_inspect_refuses_what_it_cannot_read(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "missing.onnx")]) == 2
    bad = tmp_path / "model.txt"
    bad.write_text("hello")
    assert main(["inspect", str(bad)]) == 2
    assert ".onnx files and .pt2 files" in capsys.readouterr().err
