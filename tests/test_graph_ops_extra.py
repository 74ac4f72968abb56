"""The graph operators importers of public CNNs and transformers need beyond the basic ones:
each checked against its numpy reference and an independent numpy (or torch) expression on
random inputs, and compiled (cc) into a model whose kernels must match both. Several
operators share one compiled graph, to keep the compile count down."""
from __future__ import annotations

import numpy as np
import pytest

from looptune.graph import GraphBuilder, GraphError, evaluate, fold_constants

RNG = np.random.default_rng(11)
TABLE = RNG.uniform(-1, 1, (9, 4)).astype("float32")


def rand(*shape, lo=-3.0, hi=3.0):
    return RNG.uniform(lo, hi, shape).astype("float32")


def compiled(graph):
    from looptune.graph import compile_model
    return compile_model(graph, None, "cpu", num_threads=1)


def check_graph(graph, expected: dict, inputs, *, rtol=1e-5, atol=1e-5, compile=True):
    """Every output of `graph` (named by its node) against `expected[name]`, through the numpy
    references and, with compile, through the compiled kernels."""
    names = [v.name for v in graph.outputs]
    refs = evaluate(graph, *inputs)
    outs = [refs]
    if compile:
        got = compiled(graph)(*inputs)
        outs.append(got if isinstance(got, (list, tuple)) else [got])
    for how, values in zip(("ref", "compiled"), outs):
        for name, v in zip(names, values):
            want = expected[name]
            assert v.dtype == want.dtype, (how, name, v.dtype, want.dtype)
            np.testing.assert_allclose(v, want, rtol=rtol, atol=atol, err_msg=f"{how} {name}")


# ---------------------------------------------------------------------- elementwise
def _halves():
    """Values where rounding decides: exact halves, both signs."""
    return np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -3.49], "float32")


def unary_graph():
    g = GraphBuilder("unary")
    x = g.input("x", (4, 8))
    p = g.input("p", (4, 8))  # positive: log, rsqrt, reciprocal
    out = {}

    def op(name, *args, **attrs):
        out[name] = g.op(name.split(":")[0], *args, name=name.replace(":", "_"), **attrs)

    for name in ("abs", "floor", "ceil", "sin", "cos", "softplus", "hardswish", "mish", "sign",
                 "round"):
        op(name, x)
    for name in ("reciprocal", "rsqrt", "log"):
        op(name, p)
    op("hardsigmoid", x)
    op("hardsigmoid:onnx", x, alpha=0.2, beta=0.5)
    op("clip", x, min=-1.0, max=2.0)
    op("clip:lo", x, min=0.0, max=None)  # relu
    op("clip:hi", x, max=6.0)
    op("leaky_relu", x)
    op("leaky_relu:0.2", x, alpha=0.2)
    op("elu", x)
    op("elu:2", x, alpha=2.0)
    return g.finish(*out.values())


def unary_expected(x, p):
    x64, p64 = x.astype(np.float64), p.astype(np.float64)
    sp = np.log1p(np.exp(x64))
    e = {
        "abs": np.abs(x64), "floor": np.floor(x64), "ceil": np.ceil(x64), "sin": np.sin(x64),
        "cos": np.cos(x64), "softplus": sp, "hardswish": x64 * np.minimum(np.maximum(x64 + 3, 0), 6) / 6,
        "mish": x64 * np.tanh(sp), "sign": np.sign(x64), "round": np.round(x64),
        "reciprocal": 1 / p64, "rsqrt": p64 ** -0.5, "log": np.log(p64),
        "hardsigmoid": np.clip(x64 / 6 + 0.5, 0, 1), "hardsigmoid_onnx": np.clip(x64 * 0.2 + 0.5, 0, 1),
        "clip": np.clip(x64, -1, 2), "clip_lo": np.maximum(x64, 0), "clip_hi": np.minimum(x64, 6),
        "leaky_relu": np.where(x64 > 0, x64, 0.01 * x64),
        "leaky_relu_0_2": np.where(x64 > 0, x64, 0.2 * x64),
        "elu": np.where(x64 > 0, x64, np.exp(x64) - 1),
        "elu_2": np.where(x64 > 0, x64, 2 * (np.exp(x64) - 1)),
    }
    return {k: v.astype("float32") for k, v in e.items()}


def unary_inputs():
    x = rand(4, 8)
    x[0] = _halves()
    return x, rand(4, 8, lo=0.1, hi=4.0)


def test_unary_operators_match_numpy():
    x, p = unary_inputs()
    check_graph(unary_graph(), unary_expected(x, p), (x, p), compile=False)


@pytest.mark.cc
def test_unary_operators_compile_and_match():
    x, p = unary_inputs()
    check_graph(unary_graph(), unary_expected(x, p), (x, p), rtol=2e-6, atol=2e-6)


def logic_graph():
    g = GraphBuilder("logic")
    x = g.input("x", (3, 1, 8))
    y = g.input("y", (4, 8))
    n = g.input("n", (3, 4, 8))  # with NaNs
    f = g.input("f", (3, 4, 8))  # finite: NaN -> int is undefined (C's conversion)
    i = g.input("i", (3, 4, 8), "int32")
    j = g.input("j", (4, 8), "int32")
    out = {}
    for name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
        out[name] = g.op(name, x, y, name=name)
    out["less_s"] = g.op("less", x, scalar=0.5, name="less_s")
    out["less_r"] = g.op("less", x, scalar=0.5, reverse=True, name="less_r")
    out["equal_int"] = g.op("equal", i, j, name="equal_int")
    out["isnan"] = g.op("isnan", n, name="isnan")
    b1 = g.op("greater", x, scalar=0.0)
    b2 = g.op("less", y, scalar=1.0)
    out["logical_and"] = g.op("logical_and", b1, b2, name="logical_and")
    out["logical_or"] = g.op("logical_or", i, j, name="logical_or")  # any nonzero is true
    out["logical_not"] = g.op("logical_not", j, name="logical_not")
    out["where"] = g.op("where", b1, y, n, name="where")
    out["where_float_cond"] = g.op("where", y, x, g.const("c", np.float32(7).reshape(1)),
                                   name="where_float_cond")
    out["where_int"] = g.op("where", j, i, j, name="where_int")
    out["mod_int"] = g.op("mod", i, j, name="mod_int")
    out["mod_float"] = g.op("mod", x, y, name="mod_float")
    out["cast_f2i"] = g.op("cast", f, dtype="int32", name="cast_f2i")
    out["cast_i2f"] = g.op("cast", i, dtype="float32", name="cast_i2f")
    return g.finish(*out.values())


def logic_inputs():
    x, y, f = rand(3, 1, 8), rand(4, 8), rand(3, 4, 8, lo=-50, hi=50)
    x[0, 0, :3] = y[0, :3]  # some equal pairs
    y[1, 2] = 0.0           # a false float condition, and fmod by 0 (NaN)
    n = rand(3, 4, 8)
    n[0, 0, :3] = np.nan
    i = RNG.integers(-9, 10, (3, 4, 8)).astype("int32")
    j = RNG.integers(-3, 4, (4, 8)).astype("int32")
    j[0, :4] = 0  # mod by 0 is 0; logical ops see a false
    return x, y, n, f, i, j


def logic_expected(x, y, n, f, i, j):
    bx, by = np.broadcast_arrays(x, y)
    e = {"equal": bx == by, "not_equal": bx != by, "less": bx < by, "less_equal": bx <= by,
         "greater": bx > by, "greater_equal": bx >= by, "less_s": x < 0.5, "less_r": 0.5 < x,
         "equal_int": i == j, "isnan": np.isnan(n),
         "logical_and": (x > 0) & (y < 1), "logical_or": (i != 0) | (j != 0),
         "logical_not": j == 0}
    e = {k: v.astype("int32") for k, v in e.items()}
    e["where"] = np.where(x > 0, y, n).astype("float32")
    e["where_float_cond"] = np.where(y != 0, x, 7).astype("float32")
    e["where_int"] = np.where(j != 0, i, j).astype("int32")
    safe = np.where(j == 0, 1, j)
    e["mod_int"] = np.where(j == 0, 0, i - safe * np.floor_divide(i, safe)).astype("int32")
    with np.errstate(invalid="ignore"):
        e["mod_float"] = np.fmod(x.astype(np.float64), y).astype("float32")
    e["cast_f2i"] = np.trunc(f).astype("int32")
    e["cast_i2f"] = i.astype("float32")
    return e


def test_logic_operators_match_numpy():
    inputs = logic_inputs()
    check_graph(logic_graph(), logic_expected(*inputs), inputs, compile=False)


@pytest.mark.cc
def test_logic_operators_compile_and_match():
    inputs = logic_inputs()
    check_graph(logic_graph(), logic_expected(*inputs), inputs, rtol=1e-6, atol=1e-6)


def test_elementwise_operators_check_their_inputs():
    g = GraphBuilder()
    x, i = g.input("x", (2, 3)), g.input("i", (2, 3), "int32")
    with pytest.raises(GraphError, match=r"node log \(log\): needs a float tensor"):
        g.op("log", i, name="log")
    with pytest.raises(GraphError, match=r"cast\): dtype must be one of"):
        g.op("cast", x, dtype="float64")
    with pytest.raises(GraphError, match=r"where\): takes 3 inputs"):
        g.op("where", x, x)
    with pytest.raises(GraphError, match=r"do not broadcast"):
        g.op("where", x, x, g.input("z", (4,)))
    with pytest.raises(GraphError, match=r"not a whole number"):
        g.op("clip", i, min=0.5)


# ---------------------------------------------------------------------- indexing
def gather_graph():
    g = GraphBuilder("gather")
    d = g.input("d", (5, 6, 7))
    ids = g.input("ids", (2, 3), "int32")
    ge = g.input("ge", (5, 4, 7), "int32")
    out = {
        "gather0": g.op("gather", d, ids, axis=0, name="gather0"),
        "gather1": g.op("gather", d, ids, axis=1, name="gather1"),
        "gather_neg": g.op("gather", d, ids, axis=-1, name="gather_neg"),
        "gather_elements": g.op("gather_elements", d, ge, axis=1, name="gather_elements"),
        "embedding": g.op("embedding", g.const("table", TABLE), ids, name="embedding"),
        "expand": g.op("expand", g.input("e", (3, 1, 7)), shape=(2, 3, 6, 7), name="expand"),
        "expand_keep": g.op("expand", g.input("e2", (1, 6, 1)), shape=(5, -1, 7),
                            name="expand_keep"),
        "tile": g.op("tile", d, reps=(2, 1, 3), name="tile"),
        "tile_short": g.op("tile", d, reps=(2,), name="tile_short"),
        "tile_long": g.op("tile", ids, reps=(2, 1, 2), name="tile_long"),
    }
    return g.finish(*out.values())


def gather_inputs():
    d = rand(5, 6, 7)
    ids = np.array([[0, -1, 4], [-5, 2, 3]], "int32")  # every index valid on axes 0, 1 and 2
    ge = RNG.integers(-6, 6, (5, 4, 7)).astype("int32")
    return d, ids, ge, rand(3, 1, 7), rand(1, 6, 1)


def gather_expected(d, ids, ge, e, e2):
    t = {"gather0": d[ids], "gather1": d[:, ids], "gather_neg": d[:, :, ids],
         "gather_elements": np.take_along_axis(d, np.where(ge < 0, ge + 6, ge), axis=1),
         "embedding": TABLE[ids], "expand": np.broadcast_to(e, (2, 3, 6, 7)),
         "expand_keep": np.broadcast_to(e2, (5, 6, 7)), "tile": np.tile(d, (2, 1, 3)),
         "tile_short": np.tile(d, 2), "tile_long": np.tile(ids, (2, 1, 2))}
    return {k: np.ascontiguousarray(v) for k, v in t.items()}


def test_indexing_operators_match_numpy():
    inputs = gather_inputs()
    check_graph(gather_graph(), gather_expected(*inputs), inputs, compile=False)


@pytest.mark.cc
def test_indexing_operators_compile_and_match():
    inputs = gather_inputs()
    check_graph(gather_graph(), gather_expected(*inputs), inputs, rtol=0, atol=0)


def test_constant_folding_uses_the_references():
    """A subgraph of constants (a mask computed from constant positions, as a causal mask is
    traced) folds into one constant, with the values the references give."""
    g = GraphBuilder("fold")
    x = g.input("x", (4, 4))
    rows = g.const("rows", np.arange(4, dtype="int32").reshape(4, 1))
    cols = g.const("cols", np.arange(4, dtype="int32").reshape(1, 4))
    allowed = g.op("less_equal", g.op("expand", cols, shape=(4, 4)), rows)
    mask = g.op("where", allowed, g.const("zero", np.zeros(1, "float32")),
                g.const("ninf", np.full(1, -np.inf, "float32")))
    idx = g.op("cast", g.op("round", g.op("mul", g.const("h", np.full(3, 1.25, "float32")),
                                          scalar=2.0)), dtype="int32")  # round(2.5) = 2
    graph = g.finish(g.op("add", x, mask), g.op("gather", x, idx, axis=1))
    folded = fold_constants(graph)
    assert [n.op for n in folded.nodes] == ["add", "gather"]
    assert folded.nodes[1].inputs[1].data.tolist() == [2, 2, 2]
    mask = folded.nodes[0].inputs[1].data
    np.testing.assert_array_equal(mask, np.where(np.tri(4) > 0, 0, -np.inf).astype("float32"))
    xv = rand(4, 4)
    for a, b in zip(evaluate(folded, xv), evaluate(graph, xv)):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------- reductions, norms
def norm_graph():
    g = GraphBuilder("norms")
    x = g.input("x", (3, 5, 16))
    gamma = g.const("gamma", rand(16))
    g2, b2 = g.const("g2", rand(5, 16)), g.const("b2", rand(5, 16))
    out = {
        "min": g.op("min", x, axis=-1, name="min"),
        "min_keep": g.op("min", x, axis=(0, 2), keepdims=True, name="min_keep"),
        "prod": g.op("prod", g.op("mul", x, scalar=0.5), axis=1, name="prod"),
        "rms_norm": g.op("rms_norm", x, gamma, eps=1e-5, name="rms_norm"),
        "rms_norm_plain": g.op("rms_norm", x, name="rms_norm_plain"),
        "log_softmax": g.op("log_softmax", x, name="log_softmax"),
        "log_softmax0": g.op("log_softmax", x, axis=0, name="log_softmax0"),
        "layer_norm2": g.op("layer_norm", x, g2, b2, axes_count=2, name="layer_norm2"),
        "layer_norm3": g.op("layer_norm", x, axes_count=3, eps=1e-3, name="layer_norm3"),
    }
    return g.finish(*out.values()), gamma.data, g2.data, b2.data


def norm_expected(x, gamma, g2, b2):
    x64 = x.astype(np.float64)

    def ln(v, axes, eps):
        m = v.mean(axis=axes, keepdims=True)
        return (v - m) / np.sqrt(((v - m) ** 2).mean(axis=axes, keepdims=True) + eps)

    def lsm(v, axis):
        return v - np.log(np.exp(v).sum(axis=axis, keepdims=True))

    rms = x64 / np.sqrt((x64 ** 2).mean(axis=-1, keepdims=True) + 1e-5)
    e = {"min": x64.min(axis=-1), "min_keep": x64.min(axis=(0, 2), keepdims=True),
         "prod": np.prod(x64 * 0.5, axis=1), "rms_norm": rms * gamma,
         "rms_norm_plain": x64 / np.sqrt((x64 ** 2).mean(axis=-1, keepdims=True) + 1e-6),
         "log_softmax": lsm(x64, -1), "log_softmax0": lsm(x64, 0),
         "layer_norm2": ln(x64, (1, 2), 1e-5) * g2 + b2, "layer_norm3": ln(x64, (0, 1, 2), 1e-3)}
    return {k: v.astype("float32") for k, v in e.items()}


def test_reductions_and_norms_match_numpy():
    graph, *consts = norm_graph()
    x = rand(3, 5, 16)
    check_graph(graph, norm_expected(x, *consts), (x,), compile=False)


@pytest.mark.cc
def test_reductions_and_norms_compile_and_match():
    graph, *consts = norm_graph()
    x = rand(3, 5, 16)
    check_graph(graph, norm_expected(x, *consts), (x,), rtol=1e-4, atol=1e-5)
