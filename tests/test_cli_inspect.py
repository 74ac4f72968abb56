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


def test_inspect_reads_a_torch_export_file(tmp_path, capsys):
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 8)

        def forward(self, x):
            return torch.nn.functional.hardswish(self.fc(x)).sort(-1)[0]

    ep = torch.export.export(Net().eval(), (torch.randn(2, 16),))
    path = tmp_path / "net.pt2"
    torch.export.save(ep, str(path))
    assert main(["inspect", str(path)]) == 1  # sort does not import; all else does
    out = capsys.readouterr().out
    assert "torch.export program" in out and "aten.sort" in out and "1 operator(s) unsupported" in out


@pytest.mark.cc
def test_run_compiles_a_torch_export_file(tmp_path, capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Hardswish()).eval()
    path = tmp_path / "net.pt2"
    torch.export.save(torch.export.export(net, (torch.randn(2, 16),)), str(path))
    # a work dir that does not exist is named, not taken for an empty database
    assert main(["run", str(path), "--work-dir", str(tmp_path / "none")]) == 2
    assert "that work dir does not exist" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)  # no ./looptune-work here: untuned, and it says so
    assert main(["run", str(path)]) == 0
    out = capsys.readouterr().out
    assert "0 of 1 tasks tuned" in out and "ms per inference" in out
