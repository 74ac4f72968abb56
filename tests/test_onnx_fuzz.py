"""Differential fuzzing of the ONNX importer: random small graphs (tests/onnx_graphs.py) run by
ONNX Runtime and by looptune (the imported graph's numpy reference, and the compiled model
with its default schedules) must agree: the same shape, NaN and infinities where ONNX Runtime
has them, finite values within float32 rounding of the values that fed them.

A graph ONNX Runtime rejects is discarded; one looptune refuses with an ImportError_ (an
unsupported operator or attribute) is counted as refused; a crash or a wrong answer fails, and
hypothesis shrinks it to a minimal graph. Models compile with compile_model(check=False): the
default schedules, whose kernels the kernel cache keeps across graphs. The shrunk graphs of
the defects found are plain regression tests at the end of the file."""
from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, note, settings  # noqa: E402
from onnx import helper  # noqa: E402

import looptune  # noqa: E402
from looptune.frontend.onnx import from_onnx, graph_dtype  # noqa: E402
from looptune.frontend.onnx_ops import InvalidModel  # noqa: E402
from looptune.frontend.common import ImportError_  # noqa: E402
from looptune.graph import evaluate  # noqa: E402
from onnx_graphs import Case, onnx_cases  # noqa: E402

RTOL = 1e-3   # transcendental functions differ in their last bits between libraries
ATOL = 1e-5   # times the largest finite magnitude among the values an output depends on
# an output that depends on values this large may overflow float32 in one order of summation
# (or in float32 rather than float64) and not in another: where either answer is NaN or
# infinite, it is not compared
OVERFLOW = 1e18
ACCUMULATING = {"MatMul", "Gemm", "Conv", "AveragePool", "GlobalAveragePool", "ReduceSum",
                "ReduceMean", "ReduceProd", "ReduceSumSquare", "ReduceL2", "Softmax",
                "LogSoftmax", "LayerNormalization", "Mean", "Sum"}
# A step (Floor, Ceil, Round, Sign, a comparison, a cast to integers, Mod) or a pole (Log,
# Reciprocal, a divisor) turns a rounding difference in its input into a whole step, or an
# infinity, in its output: ONNX Runtime's Sigmoid(-53.6) is 0 where looptune's is the exact
# 5e-24, and Ceil makes them 0 and 1. Where one of the node's computed inputs (ONNX Runtime's
# values) lies this close to a step or pole, its output is not compared, nor anything
# computed from it. Model inputs and initializers are exact: a step of them is compared. A
# computed dividend over a divisor (even an exact one) no larger than the dividend's rounding
# is not compared either: Elu(-3e-39) is 0 in ONNX Runtime (exp(x) - 1) and -2.1e-39 in
# looptune (expm1), over -3e-39 that is -0 against 0.7.
STEP_RTOL = 1e-5
STEP_ATOL = 1e-6  # times the input's scale


def run_ort(model, feeds, names):
    """ONNX Runtime's value of every name (graph outputs and intermediates)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    types = {v.name: v for v in m.graph.output}
    elems = _elem_types(m)
    for n in names:
        if n not in types:
            m.graph.output.append(helper.make_tensor_value_info(n, elems[n], None))
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    outs = sess.run(names, feeds)
    return dict(zip(names, outs))


def _elem_types(m) -> dict:
    inferred = onnx.shape_inference.infer_shapes(m)
    return {v.name: v.type.tensor_type.elem_type
            for v in list(inferred.graph.value_info) + list(inferred.graph.output)}


def graph_feeds(feeds: dict) -> list:
    """The feeds as a compiled model takes them: booleans as int32 (the graph's truth values)."""
    return [v.astype(np.int32) if v.dtype == np.bool_ else v for v in feeds.values()]


def scales(case: Case, values: dict) -> dict:
    """Each node output's scale: the largest finite magnitude among the values it is computed
    from (directly or through other nodes; not its own). Infinite (nothing compared) past a
    node on values of OVERFLOW size that overflowed in ONNX Runtime, or that sums inside
    (where float32 may overflow in one order of summation, or in float32 and not in the
    float64 of constant folding, with no trace in its output)."""
    arrays = {**case.feeds, **{i.name: onnx.numpy_helper.to_array(i)
                               for i in case.model.graph.initializer}, **values}
    own = {n: _finite_max(a) for n, a in arrays.items()}
    finite = {n: _all_finite(a) for n, a in arrays.items()}
    scale: dict = {}
    for node in case.model.graph.node:
        ins = [i for i in node.input if i]
        s = max([max(own.get(i, 1.0), scale.get(i, 1.0)) for i in ins] + [1.0])
        overflowed = not all(finite.get(o, True) for o in node.output) and \
            all(finite.get(i, True) for i in ins)
        if s >= OVERFLOW and (overflowed or node.op_type in ACCUMULATING):
            s = np.inf
        if _near_step(node, arrays, scale):
            s = np.inf
        scale.update((o, s) for o in node.output)
    return scale


def _near_step(node, arrays: dict, scale: dict) -> bool:
    """Whether a computed float input of `node` (ONNX Runtime's value) lies within rounding
    (STEP_RTOL, STEP_ATOL) of a step or a pole of the node's function (see STEP_RTOL)."""
    def arg(k):  # (value, tolerance) of float input k; tolerance 0 where it is not computed
        name = node.input[k] if k < len(node.input) else ""
        x = arrays.get(name)
        if x is None or np.asarray(x).dtype.kind != "f":
            return None, None
        x = np.asarray(x, np.float64)
        if name not in scale:  # a model input or an initializer: exact
            return x, np.zeros_like(x)
        return x, STEP_ATOL * scale[name] + STEP_RTOL * np.abs(x)

    def near(d, tol):  # a distance to the step within a tolerance (0: exact values, never)
        d, tol = np.broadcast_arrays(d, tol)
        fin = np.isfinite(d) & np.isfinite(tol) & (tol > 0)
        return bool((np.abs(d[fin]) <= tol[fin]).any())

    op = node.op_type
    x, tx = arg(0)
    if x is None:
        return False
    if op in ("Floor", "Ceil"):
        return near(x - np.round(x), tx)
    if op == "Round":
        return near(x - np.floor(x) - 0.5, tx)
    if op in ("Sign", "Log", "Reciprocal"):
        return near(x, tx)
    if op in ("Cast", "CastLike"):
        out = arrays.get(node.output[0])
        if out is None or np.asarray(out).dtype.kind == "f":
            return False
        if np.asarray(out).dtype == np.bool_:
            return near(x, tx)
        return near(np.where(np.round(x) != 0, x - np.round(x), np.inf), tx)  # trunc's steps
    y, ty = arg(1)
    if y is None:
        return False
    if op in ("Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal"):
        return near(x - y, tx + ty)
    if op == "Div":  # a divisor within its own rounding of 0, or within the dividend's:
        return near(y, ty) or near(y, tx)  # the dividend's rounding over it is not bounded
    if op == "Mod":  # fmod: a step wherever x / y is a whole number other than 0
        with np.errstate(all="ignore"):
            q = x / y
            d = np.where(np.round(q) != 0, (q - np.round(q)) * y, np.inf)
            return near(d, tx + ty * np.abs(q)) or near(y, ty)
    return False


def _all_finite(a) -> bool:
    a = np.asarray(a)
    return a.dtype.kind != "f" or bool(np.isfinite(a).all())


def _finite_max(a) -> float:
    a = np.asarray(a)
    if a.dtype == np.bool_ or a.size == 0:
        return 1.0
    f = np.abs(a.astype(np.float64))
    f = f[np.isfinite(f)]
    return float(f.max()) if f.size else 1.0


def compare(what: str, name: str, got, want, scale: float, elem: int) -> None:
    """looptune's `got` against ONNX Runtime's `want` for one output (see the module doc)."""
    got, want = np.asarray(got), np.asarray(want)
    where = f"{what} output {name}"
    assert got.shape == want.shape, f"{where}: shape {got.shape}, ONNX Runtime {want.shape}"
    assert str(got.dtype) == graph_dtype(elem), \
        f"{where}: dtype {got.dtype}, want {graph_dtype(elem)} for ONNX element type {elem}"
    g, w = got.reshape(-1).astype(np.float64), want.reshape(-1).astype(np.float64)
    if want.dtype.kind != "f":  # a comparison of values that may have overflowed in one
        ok = (g == w) | np.isinf(scale)  # order (or precision) and not another: not compared
    else:
        fin_g, fin_w = np.isfinite(g), np.isfinite(w)
        ok = fin_g & fin_w | (g == w) | np.isnan(g) & np.isnan(w)  # then finite ones:
        if scale >= OVERFLOW:
            ok |= ~fin_g | ~fin_w
        fin = fin_g & fin_w
        ok[fin] = np.abs(g - w)[fin] <= ATOL * scale + RTOL * np.abs(w)[fin]
    bad = np.flatnonzero(~ok)
    assert not bad.size, f"{where}: {bad.size} of {w.size} elements differ, first at flat " \
        f"index {bad[0]}: {g[bad[0]]!r}, ONNX Runtime {w[bad[0]]!r} (scale {scale:g})\n" \
        f"got  {got}\nwant {want}"


def run_case(case: Case) -> str:
    """'ok', 'refused' (looptune names what it cannot import) or 'rejected' (ONNX Runtime
    refuses the model); AssertionError on a wrong answer, any other exception on a crash."""
    g = case.model.graph
    names = [o for n in g.node for o in n.output if o]
    try:
        values = run_ort(case.model, case.feeds, names)
    except Exception:  # noqa: BLE001 - ORT rejects the drawn model: not a test case
        return "rejected"
    try:
        graph = from_onnx(case.model)
    except InvalidModel:
        raise  # ORT ran it: looptune must not call it invalid
    except ImportError_:
        return "refused"
    feeds = graph_feeds(case.feeds)
    mags = scales(case, values)
    elems = {o.name: o.type.tensor_type.elem_type for o in g.output}
    for got, o in zip(evaluate(graph, *feeds), g.output, strict=True):
        compare("reference", o.name, got, values[o.name], mags[o.name], elems[o.name])
    outs = looptune.compile_model(graph, check=False)(*feeds)
    outs = outs if isinstance(outs, tuple) else (outs,)
    for got, o in zip(outs, g.output, strict=True):
        compare("compiled", o.name, got, values[o.name], mags[o.name], elems[o.name])
    return "ok"


def fuzz(examples: int, **kw) -> Counter:
    stats = Counter()

    @settings(max_examples=examples, deadline=None, print_blob=True,
              suppress_health_check=list(HealthCheck), **kw)
    @given(onnx_cases())
    def check(case):
        note(case.text)  # a failure prints its (shrunk) model as ONNX text
        stats[run_case(case)] += 1

    start = time.perf_counter()
    check()
    print(f"onnx fuzz: {sum(stats.values())} graphs in {time.perf_counter() - start:.0f} s: "
          f"{dict(stats)}")
    return stats


# NaN and infinities in the inputs make numpy warn in the references
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.mark.cc
def test_random_onnx_graphs_match_onnx_runtime():
    stats = fuzz(200, derandomize=True, database=None)
    assert stats["ok"] >= 0.7 * sum(stats.values()), stats  # the fuzzer is not vacuous


@pytest.mark.cc
@pytest.mark.slow
def test_many_random_onnx_graphs_match_onnx_runtime():
    stats = fuzz(2000)
    assert stats["ok"] >= 0.7 * sum(stats.values()), stats


# ------------------------------------------------------------------ the shrunk defects
def _case(nodes, inputs, outputs, inits=(), opset=17, seed=0):
    """inputs / outputs: [(name, shape, elem type)]; inits: {name: array}. Random feeds,
    NaN and infinities among the floats."""
    from onnx import numpy_helper
    rng = np.random.default_rng(seed)
    g = helper.make_graph(
        nodes, "shrunk", [helper.make_tensor_value_info(n, t, s) for n, s, t in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in dict(inits).items()])
    ops = [helper.make_opsetid("", opset)]
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = helper.find_min_ir_version_for(ops)
    feeds = {}
    for n, s, t in inputs:
        if t != F:
            feeds[n] = np.asarray(rng.integers(-5, 6, s), helper.tensor_dtype_to_np_dtype(t))
            continue
        x = rng.uniform(-3, 3, s).astype(np.float32)
        if x.size > 2:
            x.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
        feeds[n] = np.asarray(x)
    return Case(m, feeds)


F, I64, B = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.BOOL
node = helper.make_node
SHRUNK = {
    # a 0-d model input reached the kernel as shape (1,) and was refused
    "scalar_input": lambda: _case([node("Relu", ["x"], ["y"])], [("x", [], F)], [("y", F)]),
    # every axis reduced away without keepdims: (1,) instead of ONNX's ()
    "full_reduction_is_0d": lambda: _case(
        [node("ReduceSum", ["x"], ["y"], keepdims=0), node("ReduceL2", ["x"], ["z"], keepdims=0)],
        [("x", [2, 3], F)], [("y", F), ("z", F)]),
    "thresholded_relu_of_0d": lambda: _case(
        [node("ThresholdedRelu", ["x"], ["y"], alpha=0.5)], [("x", [], F)], [("y", F)]),
    # (4, 1) @ (1,) came out (4, 1); a vector on the left of a matrix was refused
    "matmul_vector_right": lambda: _case(
        [node("MatMul", ["x", "w"], ["y"])], [("x", [4, 3], F)], [("y", F)],
        {"w": np.float32([0.5, -1.5, 2.0])}),
    "matmul_vector_left": lambda: _case(
        [node("MatMul", ["x", "w"], ["y"]), node("MatMul", ["x", "v"], ["z"])],
        [("x", [3], F)], [("y", F), ("z", F)],
        {"w": np.float32([[1, 2], [3, -4], [0.5, 6]]), "v": np.float32([0.5, -1.5, 2.0])}),
    # axis = rank is (size, 1); it was (1, size)
    "flatten_axis_rank": lambda: _case(
        [node("Flatten", ["x"], ["y"], axis=1)], [("x", [4], F)], [("y", F)]),
    # Pow(2, x) was x * x and Pow(0.5, x) sqrt(x): the base was taken for the exponent
    "pow_of_a_constant_base": lambda: _case(
        [node("Pow", ["two", "x"], ["y"]), node("Pow", ["half", "x"], ["z"])],
        [("x", [2, 3], F)], [("y", F), ("z", F)],
        {"two": np.float32(2.0), "half": np.float32(0.5)}),
    # three transposes in a row: the planner merged the second pair into a removed node
    "three_transposes": lambda: _case(
        [node("Transpose", ["x"], ["a"], perm=[1, 0]), node("Transpose", ["a"], ["b"], perm=[1, 0]),
         node("Transpose", ["b"], ["y"], perm=[1, 0])], [("x", [1, 4], F)], [("y", F)]),
    # an integer Pad made a float32 tensor
    "pad_of_integers": lambda: _case(
        [node("Pad", ["x", "p", "v"], ["y"])], [("x", [2, 3], I64)], [("y", I64)],
        {"p": np.int64([1, 0, 0, 2]), "v": np.int64(7)}),
    # Pow(x, 0.5) was sqrt(x), but pow(-inf, 0.5) is +inf
    "pow_half_of_minus_inf": lambda: _case(
        [node("Pow", ["x", "half"], ["y"])], [("x", [2, 3], F)], [("y", F)],
        {"half": np.float32(0.5)}),
    # a missing bound is float32's lowest / highest number: infinities become finite
    "clip_one_bound": lambda: _case(
        [node("Clip", ["x", "", "hi"], ["y"]), node("Clip", ["x", "lo"], ["z"]),
         node("Clip", ["x"], ["u"])],
        [("x", [2, 3], F)], [("y", F), ("z", F), ("u", F)],
        {"hi": np.float32(0.25), "lo": np.float32(-1.0)}),
    # an output folded at import kept its ONNX type (bool, int64), a computed one is int32
    "folded_outputs_take_graph_dtypes": lambda: _case(
        [node("Transpose", ["m"], ["y"], perm=[1, 0]), node("ReduceMax", ["k"], ["z"], axes=[1])],
        [], [("y", B), ("z", I64)],
        {"m": np.array([[True, False, True], [False, False, True]]),
         "k": np.int64([[3, -4], [5, 2]])}),
    # fmod(x, -inf) is x (C's fmod, ONNX Runtime's): a - b * trunc(a / b) made 0 * inf = NaN
    "fmod_by_infinity": lambda: Case(_case(
        [node("Mod", ["x", "d"], ["y"], fmod=1)], [("x", [3], F), ("d", [], F)],
        [("y", F)]).model, {"x": np.float32([-np.inf, 32.02, -5.5]),
                            "d": np.array(-np.inf, np.float32)}),
    # fmod by a tiny (subnormal) divisor: a / b overflowed to inf and a - b * trunc(a / b)
    # gave inf where the remainder is -7.4e-40. fmod is C's fmodf now, exact
    "fmod_tiny_divisor": lambda: Case(_case(
        [node("Mod", ["x", "d"], ["y"], fmod=1)], [("x", [3], F), ("d", [3], F)],
        [("y", F)]).model, {"x": np.float32([-26.137423, -7.5, 3.0]),
                            "d": np.float32([-3e-39, 2.0, 1e-3])}),
    # Less of a Gemm whose products overflow float32 (+inf, +inf and -inf: NaN in float32,
    # -3e68 in the reference's float64): True against ONNX Runtime's False. A boolean of
    # values that may have overflowed is not compared, as such float values are not
    "less_of_an_overflowed_gemm": lambda: Case(_case(
        [node("Flatten", ["x1"], ["v2"], axis=0), node("Gemm", ["v2", "x3"], ["v4"]),
         node("Less", ["v4", "x5"], ["v6"])],
        [("x1", [3, 3], F), ("x3", [9, 1], F), ("x5", [1, 1], F)], [("v6", B)],
        opset=13).model,
        {"x1": np.float32([[-6.6, -1e30, 5.245], [-1e30, 18.08, 1e30], [47.35, -35.19, 3e38]]),
         "x3": np.float32([[6.8e-3], [-5.9e-3], [3e38], [-1e30], [9.7e-3], [-3e38], [2e-3],
                           [-7.8e-3], [1.2e-2]]),
         "x5": np.float32([[-6.605243]])}),
    # Ceil of Sigmoid(-53.6): ONNX Runtime's sigmoid is 0 there, looptune's the exact 5e-24,
    # a difference within rounding that Ceil makes 0 against 1 (the oracle's fault: a step
    # of a computed value within rounding of the step is not compared, see STEP_RTOL)
    "ceil_of_an_underflowing_sigmoid": lambda: Case(_case(
        [node("Add", ["x1", "x2"], ["v3"]), node("Sigmoid", ["v3"], ["v8"]),
         node("Ceil", ["v8"], ["v9"])], [("x1", [2, 2], F), ("x2", [2, 2], F)], [("v9", F)],
        opset=13).model, {"x1": np.float32([[-6.6, 32.0], [5.2, -26.783468]]),
                          "x2": np.float32([[-6.6, 32.0], [5.2, -26.783468]])}),
    # Elu of a denormal over a denormal: 0 / -3e-39 in ONNX Runtime, -2.1e-39 / -3e-39 = 0.7
    # in looptune (the oracle's fault: the dividend's rounding over a divisor below it)
    "a_computed_denormal_over_a_denormal": lambda: Case(_case(
        [node("Elu", ["x3"], ["v4"], alpha=0.7), node("Div", ["v4", "x9"], ["v10"])],
        [("x3", [], F), ("x9", [], F)], [("v10", F)], opset=13).model,
        {"x3": np.array(-3e-39, np.float32), "x9": np.array(-3e-39, np.float32)}),
}


def test_a_step_is_compared_unless_its_computed_input_lies_within_rounding_of_it():
    def ceil_scale(nodes, feeds):
        case = Case(_case(nodes, [(n, list(a.shape), F) for n, a in feeds.items()],
                          [("y", F)], opset=13).model, feeds)
        names = [o for n in case.model.graph.node for o in n.output]
        return scales(case, run_ort(case.model, feeds, names))["y"]
    x = np.float32([[-53.6, 0.25], [3.0, -2.0]])
    # of a model input (exact), at a step: compared
    assert np.isfinite(ceil_scale([node("Ceil", ["x"], ["y"])], {"x": x}))
    # of a computed value far from every step: compared
    assert np.isfinite(ceil_scale([node("Sigmoid", ["x"], ["s"]), node("Ceil", ["s"], ["y"])],
                                  {"x": np.float32([[1.0, 0.25], [3.0, -2.0]])}))
    # of a sigmoid that underflows to (about) 0: not compared, nor what follows
    assert ceil_scale([node("Sigmoid", ["x"], ["s"]), node("Ceil", ["s"], ["y"])],
                      {"x": x}) == np.inf
    assert ceil_scale([node("Sigmoid", ["x"], ["s"]), node("Ceil", ["s"], ["c"]),
                       node("Neg", ["c"], ["y"])], {"x": x}) == np.inf
    # a computed dividend over an exact divisor: compared where the divisor is ordinary, not
    # where it is within the dividend's rounding of 0
    tiny = np.float32([[-3e-39, 1e-9], [2.0, -0.5]])
    assert np.isfinite(ceil_scale([node("Elu", ["x"], ["e"]), node("Div", ["e", "d"], ["y"])],
                                  {"x": x, "d": np.float32([[2.0, 0.5], [-3.0, 1.5]])}))
    assert ceil_scale([node("Elu", ["x"], ["e"]), node("Div", ["e", "d"], ["y"])],
                      {"x": x, "d": tiny}) == np.inf
    assert np.isfinite(ceil_scale([node("Div", ["x", "d"], ["y"])], {"x": x, "d": tiny}))
    # a comparison of two computed values that tie
    assert ceil_scale([node("Abs", ["x"], ["a"]), node("Neg", ["x"], ["n"]),
                       node("Less", ["a", "n"], ["b"]), node("Cast", ["b"], ["y"], to=F)],
                      {"x": x}) == np.inf


@pytest.mark.cc
@pytest.mark.parametrize("name", sorted(SHRUNK))
def test_shrunk_fuzz_cases_match_onnx_runtime(name):
    assert run_case(SHRUNK[name]()) == "ok"
