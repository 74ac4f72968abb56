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
    out["abs_int"] = g.op("abs", i, name="abs_int")
    out["sign_int"] = g.op("sign", i, name="sign_int")
    out["clip_int"] = g.op("clip", i, min=-2, max=3.0, name="clip_int")
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
    e["abs_int"], e["sign_int"], e["clip_int"] = np.abs(i), np.sign(i), np.clip(i, -2, 3)
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
        "expand_two_way": g.op("expand", d, shape=(6, 1), name="expand_two_way"),  # ONNX's
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
         "expand_keep": np.broadcast_to(e2, (5, 6, 7)), "expand_two_way": d * np.ones((6, 1), "float32"),
         "tile": np.tile(d, (2, 1, 3)),
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


# ---------------------------------------------------------------------- pooling
# (H, W, kernel, stride, padding, ceil_mode, count_include_pad): overhanging last windows,
# a window that would start in the padding (dropped), windows partly in the padding
POOLS = [(7, 7, 3, 2, 1, True, True), (7, 7, 3, 2, 1, True, False), (8, 6, 2, 2, 0, True, True),
         (9, 10, (3, 2), (2, 3), (1, 1), True, False), (6, 6, 3, 2, 1, True, True),
         (5, 5, 2, 2, 1, True, False), (6, 7, 3, 1, 1, False, False), (6, 5, 3, 3, 0, True, True)]


def pool_graph():
    """Every case in both layouts (NHWC: what graph.layout.channels_last makes of them)."""
    g = GraphBuilder("pools")
    out = []
    for layout in LAYOUTS:
        for k, (h, w, kern, stride, pad, ceil, incl) in enumerate(POOLS):
            x = g.input(f"x{layout}{k}", (2, 3, h, w) if layout == "NCHW" else (2, h, w, 3))
            out.append(g.op("max_pool2d", x, kernel=kern, stride=stride, padding=pad,
                            ceil_mode=ceil, layout=layout, name=f"max{layout}{k}"))
            out.append(g.op("avg_pool2d", x, kernel=kern, stride=stride, padding=pad,
                            ceil_mode=ceil, count_include_pad=incl, layout=layout,
                            name=f"avg{layout}{k}"))
    return g.finish(*out)


LAYOUTS = ("NCHW", "NHWC")


def pool_inputs():
    return [rand(2, 3, h, w) if layout == "NCHW" else rand(2, h, w, 3)
            for layout in LAYOUTS for h, w, *_ in POOLS]


def pool_expected(inputs):
    """torch.nn.functional's pools where torch is importable, else an independent loop."""
    e = {}
    for n, x in enumerate(inputs):
        layout, k = LAYOUTS[n // len(POOLS)], n % len(POOLS)
        xc = x if layout == "NCHW" else np.transpose(x, (0, 3, 1, 2))
        mx, av = _torch_pools(xc, *POOLS[k][2:])
        if layout == "NHWC":
            mx, av = (np.ascontiguousarray(np.transpose(v, (0, 2, 3, 1))) for v in (mx, av))
        e[f"max{layout}{k}"], e[f"avg{layout}{k}"] = mx, av
    return e


def _torch_pools(x, kern, stride, pad, ceil, incl):
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return _loop_pools(x, kern, stride, pad, ceil, incl)
    t = torch.from_numpy(x)
    return (F.max_pool2d(t, kern, stride, pad, ceil_mode=ceil).numpy(),
            F.avg_pool2d(t, kern, stride, pad, ceil_mode=ceil, count_include_pad=incl).numpy())


def _loop_pools(x, kern, stride, pad, ceil, incl):
    """PyTorch's CPU kernels' arithmetic, one output element at a time."""
    (kh, kw), (sh, sw), (ph, pw) = ((v, v) if isinstance(v, int) else v
                                    for v in (kern, stride, pad))

    def out_size(n, k, s, p):
        o = (-(-(n + 2 * p - k) // s) if ceil else (n + 2 * p - k) // s) + 1
        return o - 1 if ceil and (o - 1) * s >= n + p else o

    H, W = x.shape[2:]
    oh, ow = out_size(H, kh, sh, ph), out_size(W, kw, sw, pw)
    mx, av = np.zeros(x.shape[:2] + (oh, ow), "float32"), np.zeros(x.shape[:2] + (oh, ow), "float32")
    for i in range(oh):
        for j in range(ow):
            hs, ws = i * sh - ph, j * sw - pw
            he, we = min(hs + kh, H + ph), min(ws + kw, W + pw)
            size = (he - hs) * (we - ws)
            hs, ws, he, we = max(hs, 0), max(ws, 0), min(he, H), min(we, W)
            win = x[:, :, hs:he, ws:we].astype(np.float64)
            mx[:, :, i, j] = win.max(axis=(2, 3))
            av[:, :, i, j] = win.sum(axis=(2, 3)) / (size if incl else (he - hs) * (we - ws))
    return mx, av


def test_pooling_ceil_mode_and_count_include_pad_match_torch():
    inputs = pool_inputs()
    check_graph(pool_graph(), pool_expected(inputs), inputs, compile=False)
    for k, case in enumerate(POOLS):  # the independent loop agrees with torch too
        for a, b in zip(_loop_pools(inputs[k], *case[2:]), _torch_pools(inputs[k], *case[2:])):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.cc
def test_pooling_ceil_mode_and_count_include_pad_compile_and_match():
    inputs = pool_inputs()
    check_graph(pool_graph(), pool_expected(inputs), inputs)


# ---------------------------------------------------------------------- resize
# name: (input (N, C, H, W), sizes, attrs, the torch.nn.functional.interpolate equivalent)
RESIZES = {
    "nearest_up": ((1, 2, 4, 5), (1, 2, 8, 10), dict(coordinate_transformation_mode="asymmetric",
                                                     nearest_mode="floor"),
                   dict(mode="nearest")),
    "nearest_down": ((1, 2, 7, 9), (1, 2, 5, 4), dict(coordinate_transformation_mode="asymmetric",
                                                      nearest_mode="floor"),
                     dict(mode="nearest")),
    "nearest_exact": ((1, 2, 5, 7), (1, 2, 8, 3), dict(nearest_mode="round_prefer_ceil"),
                      dict(mode="nearest-exact")),
    "bilinear": ((2, 2, 5, 4), (2, 2, 9, 11), dict(mode="linear",
                                                   coordinate_transformation_mode="pytorch_half_pixel"),
                 dict(mode="bilinear", align_corners=False)),
    "bilinear_down": ((1, 3, 9, 8), (1, 3, 4, 5), dict(mode="linear"),
                      dict(mode="bilinear", align_corners=False)),
    "bilinear_corners": ((1, 2, 4, 6), (1, 2, 7, 13), dict(mode="linear",
                                                           coordinate_transformation_mode="align_corners"),
                         dict(mode="bilinear", align_corners=True)),
    "bilinear_scale": ((1, 1, 5, 6), (1, 1, 7, 9), dict(mode="linear", scales=(1, 1, 1.5, 1.5),
                                                        coordinate_transformation_mode="pytorch_half_pixel"),
                       dict(mode="bilinear", align_corners=False, scale_factor=1.5)),
    # ONNX's defaults, no torch equivalent: half_pixel + round_prefer_floor; asymmetric linear
    "onnx_nearest": ((1, 2, 6, 4), (1, 2, 9, 10), {}, None),
    "onnx_linear": ((1, 1, 4, 4), (1, 1, 8, 6), dict(mode="linear",
                                                     coordinate_transformation_mode="asymmetric"),
                    None),
}


def resize_graph():
    g = GraphBuilder("resize")
    out = [g.op("resize", g.input("x_" + name, shape), sizes=sizes, name=name, **attrs)
           for name, (shape, sizes, attrs, _) in RESIZES.items()]
    return g.finish(*out)


def _onnx_like_resize(x, sizes, attrs):
    """ONNX's formulas one output element at a time, 4-D, H and W resized."""
    mode = attrs.get("mode", "nearest")
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    out = np.zeros(sizes, np.float64)
    n_h, n_w = x.shape[2:]

    def src(o, n, m):
        return (o + 0.5) * n / m - 0.5 if ctm == "half_pixel" else o * n / m

    for i in range(sizes[2]):
        for j in range(sizes[3]):
            ch, cw = src(i, n_h, sizes[2]), src(j, n_w, sizes[3])
            if mode == "nearest":  # round_prefer_floor
                y = min(max(int(np.ceil(ch - 0.5)), 0), n_h - 1)
                z = min(max(int(np.ceil(cw - 0.5)), 0), n_w - 1)
                out[:, :, i, j] = x[:, :, y, z]
                continue
            ch, cw = min(max(ch, 0), n_h - 1), min(max(cw, 0), n_w - 1)
            y0, z0 = int(ch), int(cw)
            y1, z1 = min(y0 + 1, n_h - 1), min(z0 + 1, n_w - 1)
            a, b = ch - y0, cw - z0
            out[:, :, i, j] = ((1 - a) * ((1 - b) * x[:, :, y0, z0] + b * x[:, :, y0, z1])
                               + a * ((1 - b) * x[:, :, y1, z0] + b * x[:, :, y1, z1]))
    return out.astype("float32")


def resize_expected(inputs):
    torch = pytest.importorskip("torch")
    e = {}
    for x, (name, (shape, sizes, attrs, tattrs)) in zip(inputs, RESIZES.items()):
        if tattrs is None:
            e[name] = _onnx_like_resize(x, sizes, attrs)
            continue
        kw = dict(tattrs) if "scale_factor" in tattrs else dict(tattrs, size=sizes[2:])
        e[name] = torch.nn.functional.interpolate(torch.from_numpy(x), **kw).numpy()
    return e


def test_resize_matches_torch_and_onnx_formulas():
    inputs = [rand(*shape) for shape, *_ in RESIZES.values()]
    check_graph(resize_graph(), resize_expected(inputs), inputs, compile=False)


@pytest.mark.cc
def test_resize_compiles_and_matches():
    inputs = [rand(*shape) for shape, *_ in RESIZES.values()]
    check_graph(resize_graph(), resize_expected(inputs), inputs)


# ---------------------------------------------------------------------- attention
def padding_mask(b, lk, lengths):
    m = np.zeros((b, 1, 1, lk), "float32")
    for i, n in enumerate(lengths):
        m[i, ..., n:] = -np.inf
    return m


def attention_graph():
    """A padding mask per batch (an input), causal self-attention with a given scale, a
    constant 2-D mask, and 3-D inputs."""
    g = GraphBuilder("attention")
    q, k, v = g.input("q", (2, 3, 5, 8)), g.input("k", (2, 3, 7, 8)), g.input("v", (2, 3, 7, 6))
    m = g.input("m", (2, 1, 1, 7))
    x = g.input("x", (2, 2, 6, 4))
    q3, k3 = g.input("q3", (4, 5, 8)), g.input("k3", (4, 9, 8))
    out = [g.op("attention", q, k, v, m, name="padded"),
           g.op("attention", x, x, x, causal=True, scale=0.3, name="causal"),
           g.op("attention", q, k, v, g.const("bias", rand(5, 7)), name="biased"),
           g.op("attention", q3, k3, k3, name="three_d")]
    return g.finish(*out)


def attention_inputs():
    return (rand(2, 3, 5, 8), rand(2, 3, 7, 8), rand(2, 3, 7, 6), padding_mask(2, 7, (7, 4)),
            rand(2, 2, 6, 4), rand(4, 5, 8), rand(4, 9, 8))


def attention_expected(graph, q, k, v, m, x, q3, k3):
    bias = next(n for n in graph.nodes if n.name == "biased").inputs[3].data
    try:
        import torch
        from torch.nn.functional import scaled_dot_product_attention as sdpa
    except ImportError:
        torch = None

    def ref(q, k, v, mask=None, causal=False, scale=None):
        if torch is not None:
            t = [torch.from_numpy(a) for a in (q, k, v)]
            mask = None if mask is None else torch.from_numpy(mask)
            return sdpa(*t, attn_mask=mask, is_causal=causal, scale=scale).numpy()
        s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) * (scale or q.shape[-1] ** -0.5)
        s = s + (0 if mask is None else mask)
        if causal:
            s = np.where(np.tril(np.ones(s.shape[-2:])) > 0, s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        return ((p / p.sum(-1, keepdims=True)) @ v).astype("float32")

    return {"padded": ref(q, k, v, m), "causal": ref(x, x, x, causal=True, scale=0.3),
            "biased": ref(q, k, v, bias), "three_d": ref(q3, k3, k3)}


def test_attention_matches_torch():
    graph, inputs = attention_graph(), attention_inputs()
    check_graph(graph, attention_expected(graph, *inputs), inputs, compile=False)


def test_attention_lowers_to_matmuls_and_a_softmax():
    from looptune.graph.fuse import fuse
    from looptune.graph.simplify import lower_attention, prepare
    graph, inputs = attention_graph(), attention_inputs()
    lowered = lower_attention(graph)
    assert "attention" not in {n.op for n in lowered.nodes}
    for a, b in zip(evaluate(lowered, *inputs), evaluate(graph, *inputs)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    names = [grp.name for grp in fuse(prepare(graph))]
    assert "fused_batch_matmul_mul_add" in names  # scale and causal mask: the matmul's epilogue
    assert "fused_add_softmax" in names           # the padding mask: the softmax's prologue
    assert names.count("fused_batch_matmul") == 4  # probabilities @ v


@pytest.mark.cc
def test_attention_compiles_and_matches():
    graph, inputs = attention_graph(), attention_inputs()
    check_graph(graph, attention_expected(graph, *inputs), inputs, rtol=1e-4, atol=1e-5)


@pytest.mark.cc
def test_attention_kernel_of_its_own_expression_matches():
    """The attention operator's own tensor expression (unlowered), unscheduled."""
    from test_graph import run_kernels
    graph, inputs = attention_graph(), attention_inputs()
    got = run_kernels(graph, *inputs)
    for a, (name, want) in zip(got, attention_expected(graph, *inputs).items()):
        np.testing.assert_allclose(a, want, rtol=1e-4, atol=1e-5, err_msg=name)


def test_out_of_range_constant_indices_are_an_error_not_a_clamp():
    for op, idx, attrs in (("gather", [0, 5], {"axis": 0}), ("gather", [-6], {"axis": 0}),
                           ("embedding", [7], {}), ("gather_elements", [[5, 0]], {"axis": 0})):
        g = GraphBuilder()
        x = g.input("x", (1, 2))
        data = g.const("d", rand(5, 2))
        y = g.op(op, data, g.const("i", np.array(idx, "int32")), **attrs)
        with pytest.raises(GraphError, match=r"index -?\d+ is out of range for an axis of size 5"):
            fold_constants(g.finish(g.op("add", x, y)))


def test_shape_operators_check_their_inputs():
    g = GraphBuilder()
    x, i = g.input("x", (2, 3, 4, 4)), g.input("i", (2,), "int32")
    with pytest.raises(GraphError, match=r"gather\): indices must be integers"):
        g.op("gather", x, x)
    with pytest.raises(GraphError, match=r"gather\): axis 4 is out of range"):
        g.op("gather", x, i, axis=4)
    with pytest.raises(GraphError, match=r"expand\): cannot broadcast \(2, 3, 4, 4\)"):
        g.op("expand", x, shape=(5, 4, 4))
    with pytest.raises(GraphError, match=r"resize\): mode must be one of"):
        g.op("resize", x, sizes=(2, 3, 8, 8), mode="cubic")
    with pytest.raises(GraphError, match=r"resize\): sizes must give all 4"):
        g.op("resize", x, sizes=(8, 8))
    with pytest.raises(GraphError, match=r"attention\): q \(..., Lq, D\)"):
        g.op("attention", x, x, g.input("v", (2, 3, 5, 4)))
    with pytest.raises(GraphError, match=r"attention\): the mask \(3, 4\) does not broadcast"):
        g.op("attention", x, x, x, g.input("m", (3, 4)))
    with pytest.raises(GraphError, match=r"unknown attribute\(s\) count_include_pad"):
        g.op("max_pool2d", x, kernel=2, count_include_pad=False)
