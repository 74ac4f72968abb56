"""Quantized convolutions on the int8 units: a QDQ model's Conv / MatMul / Gemm of dequantized
values imports as an integer product (frontend/onnx_qdq.py), graph/quantized.py rewrites an
int32 convolution of an 8-bit-ranged input into u8 x s8 (input padded with its shifted zero
point, a per-channel compensation) or, where no unit takes it, into an exact float32 sum,
prepare lays its weight out (R, S, K, C) for the units' groups of 4 input channels, and the
default schedule computes it with the best unit; the result stays the int32 sum, bit for
bit."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune.graph import evaluate
from looptune.graph.ir import GraphBuilder, GraphError
from looptune.graph.quantized import int8_products
from looptune.graph.simplify import prepare

RNG = np.random.default_rng(11)


def conv_graph(C=8, K=16, H=9, R=3, pad=1, stride=1, groups=1, zp=7, lo=0, hi=255):
    """float input -> quantize-like clip/cast to int32 -> (q - zp) -> int32 conv -> float."""
    g = GraphBuilder("qconv")
    x = g.input("x", (1, C, H, H), "float32")
    q = g.op("cast", g.op("clip", g.op("round", x, name="r"), name="c", min=float(lo),
                          max=float(hi)), name="q", dtype="int32")
    s = g.op("sub", q, g.const("zp", np.array([zp], np.int32)), name="s")
    w = g.const("w", RNG.integers(-128, 128, (K, C // groups, R, R)).astype(np.int32))
    y = g.op("conv2d", s, w, name="conv", stride=(stride, stride), padding=(pad, pad),
             dilation=(1, 1), groups=groups)
    return g.finish(g.op("cast", y, name="f", dtype="float32"))


def inputs(graph, lo=0, hi=255):
    shape = graph.inputs[0].shape
    return RNG.integers(lo, hi + 1, shape).astype(np.float32) + RNG.uniform(-.4, .4, shape) \
        .astype(np.float32)


def convs(graph):
    return [n for n in prepare(graph).nodes if n.op == "conv2d"]


CASES = {"uint8 3x3 padded": {}, "int8-ranged": dict(zp=-3, lo=-128, hi=127),
         "strided 1x1": dict(R=1, pad=0, stride=2), "zero point 0": dict(zp=0),
         "3 channels (float32 sum)": dict(C=3), "depthwise (float32 sum)": dict(C=8, K=8, groups=8)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_rewrite_computes_the_int32_convolution_exactly(case):
    kw = CASES[case]
    graph = conv_graph(**kw)
    x = inputs(graph, kw.get("lo", 0), kw.get("hi", 255))
    want = evaluate(graph, x)[0]
    got = evaluate(int8_products(graph), x)[0]
    np.testing.assert_array_equal(got, want)
    (conv,) = convs(graph)
    if "float32" in case:
        assert conv.inputs[0].dtype == "float32"
    else:
        assert (conv.inputs[0].dtype, conv.inputs[1].dtype) == ("uint8", "int8")
        assert conv.attrs["weight_layout"] == "RSKC"
        shift = kw.get("zp", 7) + (128 if kw.get("lo", 0) < 0 else 0)
        assert conv.attrs.get("pad_value", 0) == (shift if kw.get("pad", 1) else 0)


@pytest.mark.cc
@pytest.mark.parametrize("case", ["uint8 3x3 padded", "int8-ranged", "3 channels (float32 sum)",
                                  "depthwise (float32 sum)"])
def test_compiled_int8_convolutions_are_exact(case):
    kw = CASES[case]
    graph = conv_graph(**kw)
    m = lt.compile_model(graph, None, "cpu", num_threads=1)
    for _ in range(2):
        x = inputs(graph, kw.get("lo", 0), kw.get("hi", 255))
        np.testing.assert_array_equal(np.asarray(m(x)), evaluate(graph, x)[0])


@pytest.mark.cc
def test_the_default_schedule_computes_a_channels_last_int8_convolution_on_a_unit():
    """Two convolutions: the second reads the first's channels-last output, (R, S, K, C)
    weights packed by the unit's group of 4 input channels: its kernel calls the unit."""
    from looptune.dlight import default_schedule
    from looptune.graph.tasks import extract_tasks
    from looptune.tir.intrin.x86 import INT8_DOTS
    g = GraphBuilder("two")
    x = g.input("x", (1, 16, 14, 14), "float32")

    def quantized_conv(v, name, C, K):
        q = g.op("cast", g.op("clip", g.op("round", v, name=name + "_r"), name=name + "_c",
                              min=0.0, max=255.0), name=name + "_q", dtype="int32")
        s = g.op("sub", q, g.const(name + "_zp", np.array([5], np.int32)), name=name + "_s")
        w = g.const(name + "_w", RNG.integers(-128, 128, (K, C, 3, 3)).astype(np.int32))
        y = g.op("conv2d", s, w, name=name, stride=(1, 1), padding=(1, 1), dilation=(1, 1),
                 groups=1)
        return g.op("mul", g.op("cast", y, name=name + "_f", dtype="float32"),
                    name=name + "_scaled", scalar=1e-3)

    graph = g.finish(quantized_conv(quantized_conv(x, "a", 16, 32), "b", 32, 32))
    target = lt.Target.create("cpu")
    offered = [i.name for i in INT8_DOTS if i.offered_by(target)]
    task = [t for t in extract_tasks(graph) if "conv2d" in t.task_name][-1]
    assert task.func.params[0].dtype == "uint8"
    trace = str(default_schedule(task.func, target).trace)
    assert any(name in trace for name in offered), trace
    m = lt.compile_model(graph, None, "cpu", num_threads=1)
    x = inputs(graph) / 64
    np.testing.assert_allclose(m(x), evaluate(graph, x)[0], rtol=1e-6, atol=1e-6)


def test_pad_value_is_refused_where_it_has_no_meaning():
    g = GraphBuilder("bad")
    x = g.input("x", (1, 4, 5, 5), "float32")
    w = g.const("w", np.ones((4, 4, 3, 3), np.float32))
    with pytest.raises(GraphError, match="pad_value is for 8-bit inputs"):
        g.op("conv2d", x, w, name="c", padding=(1, 1), pad_value=3)
    u = g.input("u", (1, 4, 5, 5), "uint8")
    w8 = g.const("w8", np.ones((4, 4, 3, 3), np.int8))
    with pytest.raises(GraphError, match="not a uint8 value"):
        g.op("conv2d", u, w8, name="d", padding=(1, 1), pad_value=300)
    with pytest.raises(GraphError, match="weight_layout must be one of KCRS, CRSK, RSKC"):
        g.op("conv2d", u, w8, name="e", weight_layout="SRCK")


def test_only_kernels_with_guarded_loads_get_the_compiler_workaround():
    """GCC's if-conversion bug needs a load under a condition (a padded read); other kernels
    compile without -fno-tree-loop-if-convert, so their NaN-aware clips vectorize."""
    from looptune.backend import CPUBackend
    from looptune.backend.cpu import has_guarded_loads
    from looptune.runtime.compiler import workaround_flags
    from looptune import te
    backend = CPUBackend(lt.Target.create("cpu"))
    A = te.placeholder((64,), name="A")
    clip = te.compute((64,), lambda i: te.max(te.min(A[i], 6.0), 0.0), name="clip")
    B = te.placeholder((64,), name="B")
    padded = te.compute((64,), lambda i: te.if_then_else(A[i] > 0.0, B[i], 0.5), name="pad")
    both = te.compute((64,), lambda i: te.all(A[i] > 0.0, B[i] > 0.0).astype("float32"),
                      name="both")  # C's &&: B[i] is read only where A[i] > 0
    results = {}
    for name, out in (("clip", clip), ("pad", padded), ("both", both)):
        func = te.create_prim_func([A, out] if name == "clip" else [A, B, out], name=name)
        results[name] = has_guarded_loads(backend.lower(func))
    assert results == {"clip": False, "pad": True, "both": True}
    from looptune.env import cc
    workaround = set(workaround_flags(cc()))
    assert workaround <= set(backend.flags(guarded_loads=True))
    assert not workaround & set(backend.flags(guarded_loads=False)) or not workaround


@pytest.mark.cc
def test_on_an_avx2_machine_a_quantized_cnn_runs_exactly_with_no_wider_instruction(monkeypatch):
    """LOOPTUNE_HOST_ISA=avx2 stands in for a CPU without VNNI, BF16 or AMX: the int8
    convolutions take the exact AVX2 unit (vpmaddwd) and the model's code has no 512-bit
    register, no VNNI and no AMX instruction."""
    import shutil
    import subprocess
    from looptune.target import host
    from looptune.target.target import detected
    if not (detected().has("avx2") and detected().has("fma")):
        pytest.skip("narrowing to AVX2 needs a machine with AVX2 and FMA")
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("no objdump to read the object code")
    monkeypatch.setenv("LOOPTUNE_HOST_ISA", "avx2")
    host.cache_clear()
    try:
        g = GraphBuilder("avx2")
        x = g.input("x", (1, 8, 10, 10), "float32")
        v = x
        for name, C, K in (("a", 8, 16), ("b", 16, 16)):
            q = g.op("cast", g.op("clip", g.op("round", v, name=name + "_r"), name=name + "_c",
                                  min=-128.0, max=127.0), name=name + "_q", dtype="int32")
            s = g.op("sub", q, g.const(name + "_zp", np.array([-2], np.int32)), name=name + "_s")
            w = g.const(name + "_w", RNG.integers(-128, 128, (K, C, 3, 3)).astype(np.int32))
            y = g.op("conv2d", s, w, name=name, stride=(1, 1), padding=(1, 1), dilation=(1, 1),
                     groups=1)
            v = g.op("mul", g.op("cast", y, name=name + "_f", dtype="float32"),
                     name=name + "_scaled", scalar=2e-4)
        graph = g.finish(v)
        m = lt.compile_model(graph, None, "cpu", num_threads=1)
        x = inputs(graph, -128, 127)
        np.testing.assert_allclose(m(x), evaluate(graph, x)[0], rtol=1e-6, atol=1e-6)
        asm = subprocess.run([objdump, "-d", str(m.lib_path)], capture_output=True,
                             text=True).stdout
        assert "vpmaddwd" in asm
        for wider in ("%zmm", "vpdpbusd", "tdpbusd", "ldtilecfg", "vdpbf16ps"):
            assert wider not in asm, wider
    finally:
        monkeypatch.delenv("LOOPTUNE_HOST_ISA", raising=False)
        host.cache_clear()
