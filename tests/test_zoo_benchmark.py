"""benchmarks/zoo.py on the zoo's smallest model (the CI tier of the benchmark): both import
paths, the check against torch, compile times and the ratios it reports are all there. It
asserts no speed (CI machines are noisy): the benchmark is run for figures, not here."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


@pytest.mark.cc
def test_the_zoo_benchmark_runs_m5_through_both_paths(tmp_path):
    script = Path(__file__).parent.parent / "benchmarks" / "zoo.py"
    out = tmp_path / "zoo.json"
    proc = subprocess.run([sys.executable, str(script), "--models", "m5", "--rounds", "1",
                           "--work-dir", str(tmp_path / "w"), "--json", str(out),
                           "--png", str(tmp_path / "zoo.png")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    row, = data["rows"]
    assert row["torch_import"] == "ok" and row["onnx_import"] == "ok" and row["correct"]
    assert row["torch_err"] <= 1e-3 and row["onnx_err"] <= 1e-3
    assert row["compile_cold_s"] > 0 and row["compile_warm_s"] > 0
    assert row["untuned_vs_ort_1t"] > 0 and data["summary"]["imported"] == 1
    assert (tmp_path / "zoo.png").stat().st_size > 1000
    assert "latency at one thread" in proc.stdout
