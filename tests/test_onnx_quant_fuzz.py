"""Differential fuzzing of the quantized ONNX importer: random small quantized graphs
(tests/onnx_quant_graphs.py: QDQ groups, QOperator nodes, quantize_dynamic's chains) run by
ONNX Runtime (CPUExecutionProvider, its default optimizations, which fuse QDQ groups into its
integer kernels) and by looptune (the imported graph's numpy reference, and the compiled model
with its default schedules) must agree: the same shapes, quantized values within one step,
int32 accumulators exactly, float values within one step of their scale.

One step, not exactly: where ONNX Runtime's integer kernel and looptune's float computation
round a value that lies within float32 rounding of a tie, they may round to neighbours; that
is rare, so a tensor with more than a few elements (2, or 5%; see Spec.off) one step off
fails too (a wrong rounding rule shows there, at the exact ties that power-of-two scales and
the tie values of the inputs make). A one-step difference in a quantized tensor that later
nodes read may grow in them past one step, so every quantized tensor that a later node reads
is an output of the model too (which changes none of ONNX Runtime's fusions), and a value is
compared only where each quantized tensor it is computed from equals ONNX Runtime's. Where
one differs (by one step), the model is cut there: looptune computes the rest from ONNX
Runtime's value of it, and is compared again.

A graph ONNX Runtime rejects is discarded; one looptune refuses is counted as refused, and
its ImportError_ must name the node and say why (not an internal error's text); a crash or a
wrong answer fails, and hypothesis shrinks it to a minimal graph. The shrunk graphs of the
defects found are plain regression tests at the end of the file."""
from __future__ import annotations

import re
import time
from collections import Counter

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, note, settings  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import looptune  # noqa: E402
from looptune.frontend.common import ImportError_  # noqa: E402
from looptune.frontend.onnx import from_onnx, graph_dtype  # noqa: E402
from looptune.frontend.onnx_ops import InvalidModel  # noqa: E402
from looptune.graph import evaluate  # noqa: E402
from onnx_quant_graphs import F, I32, MS, U8, I8, Case, Spec, quant_cases  # noqa: E402

ort.set_default_logger_severity(4)  # a model it rejects is discarded, not logged
QUANTIZED = (U8, I8, onnx.TensorProto.UINT16, onnx.TensorProto.INT16)
SLACK = 1e-3  # of a float step: the product (q - zp) * scale rounds in float32
# what an internal error looks like in an import error's text (onnx.py's _reason): a refusal
# must say what is not supported, not what broke
INTERNAL = re.compile(r"\b(Type|Key|Value|Index|Attribute|ZeroDivision|Arithmetic|Assertion|"
                      r"Runtime|Overflow|Name)Error\b")


# ------------------------------------------------------------------ the two runs
def exposed(case: Case):
    """The model with every quantized tensor that a later node reads (and every value a
    comparison needs) among its outputs."""
    m = onnx.ModelProto()
    m.CopyFrom(case.model)
    outs = {o.name for o in m.graph.output}
    read = {i for n in m.graph.node for i in n.input}
    for name, spec in case.specs.items():
        if name not in outs and name in read and spec.elem in QUANTIZED:
            m.graph.output.append(helper.make_tensor_value_info(name, spec.elem, None))
            outs.add(name)
    for name in sorted(case.needs - outs):
        m.graph.output.append(helper.make_tensor_value_info(name, F, None))
    return m


def run_ort(model, feeds) -> dict:
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    return dict(zip(names, sess.run(names, feeds)))


def cut(model, at: set, want: dict, feeds: dict):
    """(the model whose nodes read ONNX Runtime's values of the tensors `at` as inputs, its
    feeds in input order)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in m.graph.node:
        for i, name in enumerate(n.input):
            if name in at:
                n.input[i] = name + "_ort"
    feeds = dict(feeds)
    for name in sorted(at):
        a = want[name]
        m.graph.input.append(helper.make_tensor_value_info(
            name + "_ort", helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))
        feeds[name + "_ort"] = a
    return m, [feeds[i.name] for i in m.graph.input]


def graph_inputs(feeds: list) -> list:
    """Integer feeds as a looptune graph takes them: int32."""
    return [a.astype(np.int32) if a.dtype.kind in "iub" else a for a in feeds]


def reference(model, feeds) -> dict:
    graph = from_onnx(model)
    return dict(zip([o.name for o in model.graph.output],
                    evaluate(graph, *graph_inputs(feeds))))


def compiled(model, feeds) -> dict:
    outs = looptune.compile_model(from_onnx(model), check=False)(*graph_inputs(feeds))
    outs = outs if isinstance(outs, tuple) else (outs,)
    return dict(zip([o.name for o in model.graph.output], outs))


# ------------------------------------------------------------------ the comparison
def upstream(model) -> dict:
    """Each value's quantized ancestors among the model's outputs (those it is computed
    from through other nodes)."""
    outs = {o.name for o in model.graph.output}
    made = {o: n for n in model.graph.node for o in n.output}
    memo: dict = {}

    def of(name):
        if name not in memo:
            memo[name] = set()
            n = made.get(name)
            for i in (n.input if n is not None else ()):
                memo[name] |= of(i) | ({i} if i in outs and i in made else set())
        return memo[name]
    return {o: of(o) for o in outs}


def unit_of(spec: Spec, values: dict):
    """One step of a float value's scale (see Spec.unit)."""
    if isinstance(spec.unit, tuple):
        _, x, factor = spec.unit
        x = np.asarray(values[x], np.float32)
        span = np.float32(max(float(x.max()), 0.0)) - np.float32(min(float(x.min()), 0.0))
        return factor * (span / np.float32(255) if span else 1.0)
    return spec.unit


def compare(where: str, got, want, spec: Spec, values: dict) -> None:
    """looptune's `got` against ONNX Runtime's `want` for one value, by its spec."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{where}: shape {got.shape}, ONNX Runtime {want.shape}"
    assert str(got.dtype) == graph_dtype(spec.elem), \
        f"{where}: dtype {got.dtype}, want {graph_dtype(spec.elem)} for ONNX type {spec.elem}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    if spec.elem == F:
        assert np.isfinite(g).all() == np.isfinite(w).all(), f"{where}: got {got}\nwant {want}"
        tol = np.broadcast_to(np.asarray(unit_of(spec, values), np.float64) * (1 + SLACK)
                              + 1e-6 * np.abs(w), w.shape)
    else:
        tol = np.full(w.shape, float(spec.steps))
    bad = np.flatnonzero(~(np.abs(g - w) <= tol))
    assert not bad.size, f"{where}: {bad.size} of {w.size} elements differ, first at flat index " \
        f"{bad[0]}: {g.reshape(-1)[bad[0]]!r}, ONNX Runtime {w.reshape(-1)[bad[0]]!r} " \
        f"(tolerance {tol.reshape(-1)[bad[0]]:g})\ngot  {got}\nwant {want}"
    if spec.elem != F:  # one step off where a value lies within rounding of a tie: rare
        off = int(np.count_nonzero(g != w))
        assert off <= max(2, int(w.size * spec.off)), f"{where}: {off} of {w.size} elements " \
            f"are one step off, more than rounding near ties explains\ngot  {got}\nwant {want}"


def check(what: str, case: Case, model, want: dict, run) -> int:
    """looptune's values by `run` against ONNX Runtime's `want`, cut where a quantized tensor
    differs (by one step: more fails) until none does; the number of cuts."""
    at: set = set()
    feeds = dict(case.feeds)
    while True:
        m, ins = cut(model, at, want, feeds)
        got = run(m, ins)
        values = {**feeds, **want}
        ancestors = upstream(m)
        differ = {o for o in got if case.specs.get(o, Spec(F)).elem in QUANTIZED
                  and not np.array_equal(np.asarray(got[o]).reshape(want[o].shape), want[o])}
        for o in got:
            if o in case.specs and not ancestors[o] & differ:
                compare(f"{what} value {o}", got[o], want[o], case.specs[o], values)
        if differ <= at:
            return len(at)
        at |= differ


def refusal(e: ImportError_, model) -> str:
    """The reason of a refusal, checked: it names a node of the model and is not an internal
    error's text."""
    text = str(e)
    names = {n.name for n in model.graph.node} | {o for n in model.graph.node for o in n.output}
    assert any(f"node {n}" in text for n in names), f"a refusal that names no node: {text}"
    assert not INTERNAL.search(text), f"an internal error reported as a refusal: {text}"
    line = next((ln for ln in text.splitlines() if "(e.g. node" in ln), text.splitlines()[0])
    line = re.sub(r"node [^\s)]+", "node N", line.strip())
    return re.sub(r"\b\d+(\.\d+)?(e-?\d+)?\b", "#", line)[:110]


def run_case(case: Case, stats: Counter | None = None) -> str:
    """'ok', 'refused' (looptune names what it cannot import) or 'rejected' (ONNX Runtime
    refuses the model); AssertionError on a wrong answer, any other exception on a crash."""
    stats = stats if stats is not None else Counter()
    model = exposed(case)
    try:
        want = run_ort(model, case.feeds)
    except Exception:  # noqa: BLE001 - ORT rejects the drawn model: not a test case
        return "rejected"
    try:
        from_onnx(model)
    except InvalidModel:
        raise  # ORT ran it: looptune must not call it invalid
    except ImportError_ as e:
        stats["refused: " + refusal(e, model)] += 1
        return "refused"
    for what, run in (("reference", reference), ("compiled", compiled)):
        cuts = check(what, case, model, want, run)
        if cuts:
            stats[f"{what} cut where a quantized tensor is one step off"] += 1
    return "ok"


def fuzz(examples: int, **kw) -> Counter:
    stats, details = Counter(), Counter()

    @settings(max_examples=examples, deadline=None, print_blob=True,
              suppress_health_check=list(HealthCheck), **kw)
    @given(quant_cases())
    def check_one(case):
        note(case.text)  # a failure prints its (shrunk) model as ONNX text
        stats[run_case(case, details)] += 1

    start = time.perf_counter()
    check_one()
    print(f"quantized onnx fuzz: {sum(stats.values())} graphs in "
          f"{time.perf_counter() - start:.0f} s: {stats['ok']} compared, {stats['refused']} "
          f"refused, {stats['rejected']} discarded (ONNX Runtime rejects them)")
    for reason, n in details.most_common():  # refusals by reason; graphs cut (see the doc)
        print(f"  {n:5d}  {reason}")
    return stats


@pytest.mark.cc
def test_random_quantized_graphs_match_onnx_runtime():
    stats = fuzz(120, derandomize=True, database=None)
    assert stats["ok"] >= 0.8 * sum(stats.values()), stats  # the fuzzer is not vacuous


@pytest.mark.cc
@pytest.mark.slow
def test_many_random_quantized_graphs_match_onnx_runtime():
    stats = fuzz(1100)
    assert stats["ok"] >= 1000, stats


# ------------------------------------------------------------------ the comparison itself
def test_a_value_is_compared_only_where_its_quantized_inputs_agree():
    """A quantized tensor that a later node reads, one step off in one element: what is
    computed from it is not compared (looptune's value here is far off, unless the model is
    cut there), the tensor itself is (within one step); two steps fail, and so do one-step
    differences in more elements than rounding near ties explains."""
    case = _case([node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                  node("DequantizeLinear", ["q", "s", "z"], ["y"])],
                 [("x", [8], F)], [("y", F)], {"s": np.float32(0.5), "z": np.uint8(3)},
                 {"y": Spec(F, 0.5), "q": Spec(U8)})
    model = exposed(case)
    assert [o.name for o in model.graph.output] == ["y", "q"]
    want = run_ort(model, case.feeds)

    def off(steps, at):
        def run(m, feeds):
            q = want["q"].astype(np.int32)
            q[at] += steps
            cut = "q_ort" in {i.name for i in m.graph.input}
            return {"y": want["y"] + (0.0 if cut else 4.0), "q": q}
        return run
    assert check("test", case, model, want, off(1, [0])) == 1
    with pytest.raises(AssertionError, match="test value q: 1 of 8 elements differ"):
        check("test", case, model, want, off(2, [0]))
    with pytest.raises(AssertionError, match="test value q: 3 of 8 elements are one step off"):
        check("test", case, model, want, off(1, [0, 1, 2]))


# ------------------------------------------------------------------ the shrunk defects
def _case(nodes, inputs, outputs, inits=(), specs=None, *, opset=21, seed=0, feeds=None):
    """inputs / outputs: [(name, shape, elem type)] / [(name, elem type)]; inits: {name:
    array}; specs: {name: Spec} (default: every output's, one step); random feeds (floats
    over +-3, never 0; integers over their type's range) unless given."""
    rng = np.random.default_rng(seed)
    g = helper.make_graph(
        nodes, "shrunk", [helper.make_tensor_value_info(n, t, s) for n, s, t in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in dict(inits).items()])
    ops = [helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = helper.find_min_ir_version_for(ops[:1])
    given_feeds = dict(feeds or {})
    for n, s, t in inputs:
        if n in given_feeds:
            continue
        if t == F:
            x = rng.uniform(-3, 3, s).astype(np.float32)
            given_feeds[n] = np.where(x == 0, np.float32(1), x)
        else:
            dt = helper.tensor_dtype_to_np_dtype(t)
            info = np.iinfo(dt)
            given_feeds[n] = rng.integers(info.min, int(info.max) + 1, s).astype(dt)
    specs = specs or {n: Spec(t, steps=1 if t != I32 else 0) for n, t in outputs}
    return Case(m, given_feeds, specs)


node = helper.make_node
f32 = np.float32
SHRUNK = {
    # QLinearAveragePool with count_include_pad: ONNX Runtime divides every window by the
    # kernel's size, also the last one that ceil_mode runs past the input, where ONNX's
    # AveragePool (and looptune's) divides by the part within it: -116 against -107
    "qlinear_average_pool_ceil_window_counts_the_whole_kernel": lambda: _case(
        [node("QLinearAveragePool", ["q", "s", "z", "s", "zy"], ["y"], domain=MS,
              auto_pad="VALID", ceil_mode=1, channels_last=1, count_include_pad=1,
              kernel_shape=[2], strides=[2])],
        [("q", [5, 3, 1], I8)], [("y", I8)], {"s": f32(0.25), "z": np.int8(0),
                                              "zy": np.int8(-98)}),
    # the same in a QDQ model, which ONNX Runtime runs as QLinearAveragePool
    "qdq_average_pool_ceil_window_counts_the_whole_kernel": lambda: _case(
        [node("DequantizeLinear", ["q", "s", "z"], ["d"]),
         node("AveragePool", ["d"], ["p"], ceil_mode=1, count_include_pad=1,
              kernel_shape=[1, 2], strides=[2, 2]),
         node("QuantizeLinear", ["p", "sy", "z"], ["y"])],
        [("q", [2, 4, 1, 5], U8)], [("y", U8)], {"s": f32(9.563061), "z": np.uint8(128),
                                                 "sy": f32(9.600563)}),
    # a window over the whole image without padding: ONNX Runtime's QLinearAveragePool is
    # its global average then, rounding before the zero point is added: 1.5 + 1 is 3, not 2
    "qlinear_average_pool_over_the_whole_image_is_a_global_average": lambda: _case(
        [node("QLinearAveragePool", ["q", "s", "z", "s", "zy"], ["y"], domain=MS,
              kernel_shape=[2])],
        [("q", [1, 8, 2], U8)], [("y", U8)], {"s": f32(1.0), "z": np.uint8(0),
                                              "zy": np.uint8(1)},
        feeds={"q": np.uint8(np.arange(1, 17).reshape(1, 8, 2))}),
    # DequantizeLinear from int8 -> Softmax -> QuantizeLinear to uint8: ONNX Runtime fuses
    # nothing between two types and quantizes the float softmax (1 / (1/255) is 255), where
    # its QLinearSoftmax takes floor(1 / scale) steps per 1 (254)
    "qdq_softmax_between_two_types_is_not_fused": lambda: _case(
        [node("DequantizeLinear", ["q", "s", "z"], ["d"]),
         node("Softmax", ["d"], ["p"], axis=1),
         node("QuantizeLinear", ["p", "sy", "zy"], ["y"])],
        [("q", [5, 1], I8)], [("y", U8)], {"s": f32(0.007843138), "z": np.int8(0),
                                           "sy": f32(0.003921569), "zy": np.uint8(0)}),
    # uint8 + int8 -> uint8: not fused either, so the zero point is added after rounding
    # (QLinearAdd adds it before): round(0.5) + 1 is 1, round(1.5) is 2
    "qdq_add_between_two_types_is_not_fused": lambda: _case(
        [node("DequantizeLinear", ["a", "h", "za"], ["da"]),
         node("DequantizeLinear", ["b", "h", "zb"], ["db"]),
         node("Add", ["da", "db"], ["c"]),
         node("QuantizeLinear", ["c", "one", "zc"], ["y"])],
        [("a", [2, 8], U8), ("b", [2, 8], I8)], [("y", U8)],
        {"h": f32(0.5), "za": np.uint8(0), "zb": np.int8(0), "one": f32(1.0),
         "zc": np.uint8(1)},
        feeds={"a": np.uint8(np.arange(16).reshape(2, 8)),
               "b": np.int8(np.arange(16).reshape(2, 8) % 3)}),
}


@pytest.mark.cc
@pytest.mark.parametrize("name", sorted(SHRUNK))
def test_shrunk_fuzz_cases_match_onnx_runtime(name):
    assert run_case(SHRUNK[name]()) == "ok"
