"""Models quantized with PT2E (prepare_pt2e / convert_pt2e and the X86 inductor quantizer,
torchao's): each quantized_decomposed operator matches torch bit for bit on random inputs
with values at rounding ties and values that saturate (the numpy references and the compiled
kernels); a CNN and a transformer-style block, statically and dynamically quantized, compute
what the quantized torch model computes through from_torch and through torch.compile; their
linear layers become int32 matmuls that prepare puts on the int8 units."""
from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.ao.quantization.fx._decomposed",  # registers the operators
                    reason="this torch has no quantized_decomposed operators")

from looptune.frontend.common import ImportError_  # noqa: E402
from looptune.frontend.torch import from_torch  # noqa: E402
from looptune.graph import evaluate  # noqa: E402
from looptune.graph.simplify import prepare  # noqa: E402

Q = torch.ops.quantized_decomposed
S, ZP = 0.020851073786616325, 131  # a scale and zero point calibration gave


def pt2e():
    """(prepare_pt2e, convert_pt2e, X86InductorQuantizer, its default config function): torchao's,
    else older torch's own; the test skips, saying what is missing, without either."""
    import importlib
    missing = []
    for base in ("torchao.quantization.pt2e", "torch.ao.quantization"):
        try:
            flow = importlib.import_module(base + ".quantize_pt2e")
            x86 = importlib.import_module(base + ".quantizer.x86_inductor_quantizer")
            return (flow.prepare_pt2e, flow.convert_pt2e, x86.X86InductorQuantizer,
                    x86.get_default_x86_inductor_quantization_config)
        except Exception as e:  # noqa: BLE001 - absent, or a torchao built for another torch
            missing.append(f"{base}: {type(e).__name__}: {e}")
    pytest.skip(f"PT2E quantization is not available with torch {torch.__version__} (pip "
                f"install torchao): {'; '.join(missing)}")


class Fn(torch.nn.Module):
    """forward = fn(self, *xs), with `buffers` (per-channel scales, zero points) as buffers."""

    def __init__(self, fn, **buffers):
        super().__init__()
        self.fn = fn
        for k, v in buffers.items():
            self.register_buffer(k, v)

    def forward(self, *xs):
        return self.fn(self, *xs)


def ties(scale, ks):
    """float32 values x with x * float32(1 / scale), torch's product, exactly k + 0.5: where
    half to even and half away from zero part (and where a division would round otherwise)."""
    inv, out = np.float32(1.0 / scale), []
    for k in ks:
        t = np.float32(k + 0.5)
        x = np.float32(t / inv)
        for _ in range(8):
            p = x * inv
            if p == t:
                out.append(x)
                break
            x = np.nextafter(x, np.float32(np.inf if p < t else -np.inf))
    return np.asarray(out, np.float32)


def quantizable(shape, scale=S, seed=0):
    """Random values (none zero) with ties and values beyond the 8-bit range, in `shape`."""
    r = np.random.default_rng(seed)
    n = int(np.prod(shape))
    special = np.concatenate([ties(scale, range(-140, 140, 3)), [300 * scale, -300 * scale]])
    x = r.normal(0, 40 * scale, n).astype(np.float32)
    x[:min(n, special.size)] = special[:n]
    return r.permutation(x).reshape(shape)


def q8(x, s=S, zp=ZP):
    return Q.quantize_per_tensor(x, s, zp, 0, 255, torch.uint8)


def _per_channel(self, x):
    q = Q.quantize_per_channel(x, self.s, self.z, 1, -128, 127, torch.int8)
    return q, Q.dequantize_per_channel(q, self.s, self.z, 1, -128, 127, torch.int8)


def _dynamic(self, x):
    s, z = Q.choose_qparams.tensor(x, 0, 255, 2.0 ** -12, torch.uint8)
    q = Q.quantize_per_tensor.tensor(x, s, z, 0, 255, torch.uint8)
    return q, Q.dequantize_per_tensor.tensor(q, s, z, 0, 255, torch.uint8), s, z


def _cases():
    shape = (4, 6, 10)
    x = torch.from_numpy(quantizable(shape))
    codes = torch.from_numpy(np.random.default_rng(1).integers(0, 256, shape, np.uint8))
    scales = torch.tensor([S, 0.01, 0.07, 0.003, 0.5, 1 / 3], dtype=torch.float32)
    zps = torch.tensor([0, 3, -5, 0, 1, -128])
    return {
        "quantize_per_tensor": (Fn(lambda s, x: q8(x)), x),
        "quantize_per_tensor_int8_narrow": (Fn(lambda s, x: Q.quantize_per_tensor(
            x, S, -7, -127, 127, torch.int8)), x),
        "dequantize_per_tensor": (Fn(lambda s, q: Q.dequantize_per_tensor(
            q, S, ZP, 0, 255, torch.uint8)), codes),
        "int16_round_trip": (Fn(lambda s, x: Q.dequantize_per_tensor(Q.quantize_per_tensor(
            x, S / 256, 11, -32768, 32767, torch.int16), S / 256, 11, -32768, 32767,
            torch.int16)), x),
        "per_channel": (Fn(_per_channel, s=scales, z=zps), x * 3),
        "dynamic": (Fn(_dynamic), x - 0.3),
    }


CASES = sorted(_cases())


def _compare(got, want, what):
    """Exactly: quantized values as integers, floats bit for bit."""
    got = got if isinstance(got, (list, tuple)) else [got]
    want = want if isinstance(want, (list, tuple)) else [want]
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        w = w.detach().numpy()
        g = np.asarray(g).reshape(w.shape)
        if w.dtype.kind in "iu":
            g, w = g.astype(np.int64), w.astype(np.int64)
        np.testing.assert_array_equal(g, w, err_msg=f"{what} output {i}")


def _graph_inputs(x):
    return x.numpy().astype(np.int32) if not x.dtype.is_floating_point else x.numpy()


def test_the_tie_inputs_tell_a_product_by_the_reciprocal_from_a_division():
    x = quantizable((4, 6, 10))
    by_reciprocal = np.rint(x * np.float32(1.0 / S))
    assert np.any(by_reciprocal != np.rint(x / np.float32(S)))
    assert np.any(by_reciprocal % 2 == 0) and np.any(np.abs(x * np.float32(1.0 / S) % 1) == 0.5)


@pytest.mark.parametrize("name", CASES)
def test_operators_import_as_torch_computes(name):
    model, x = _cases()[name]
    _compare(evaluate(from_torch(model, (x,)), _graph_inputs(x)), model(x), name)


@pytest.mark.cc
def test_operators_compile_as_torch_computes():
    """All the cases as one model (one compile)."""
    import looptune
    cases = _cases()
    models = [cases[n][0] for n in CASES]
    xs = tuple(cases[n][1] for n in CASES)
    every = Fn(lambda s, *xs: tuple(m(x) for m, x in zip(models, xs)))
    for i, m in enumerate(models):
        every.add_module(f"m{i}", m)
    compiled = looptune.compile_model(from_torch(every, xs), target="cpu")
    got = compiled(*[_graph_inputs(x) for x in xs])
    want = every(*xs)
    flat = [w for ws in want for w in (ws if isinstance(ws, tuple) else (ws,))]
    _compare(list(got), flat, "compiled")


# ------------------------------------------------------------------ quantized models
class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv1(x))), 2)
        return self.fc(torch.relu(self.conv2(y)).flatten(1))


class Block(torch.nn.Module):
    """Attention (q, k, v and output projections) and an MLP, post-norm."""

    def __init__(self, d=32):
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
        self.norm = torch.nn.LayerNorm(d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)

    def forward(self, x):
        a = torch.softmax(self.q(x) @ self.k(x).transpose(-1, -2) / 32 ** 0.5, -1) @ self.v(x)
        x = self.norm(x + self.o(a))
        return x + self.fc2(torch.relu(self.fc1(x)))


MODELS = {"cnn": (CNN, (2, 3, 16, 16)), "block": (Block, (2, 8, 32))}


@functools.lru_cache(maxsize=None)
def quantized(model: str, dynamic: bool):
    """The model after prepare_pt2e, calibration on random inputs and convert_pt2e, exported."""
    prepare_pt2e, convert_pt2e, X86InductorQuantizer, config = pt2e()
    cls, shape = MODELS[model]
    torch.manual_seed(0)
    m = cls().eval()
    if model == "cnn":
        with torch.no_grad():  # non-trivial batch-norm statistics
            m.bn.running_mean.uniform_(-0.5, 0.5)
            m.bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(shape)
    quantizer = X86InductorQuantizer()
    quantizer.set_global(config(is_dynamic=dynamic))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchao's deprecation notes
        prepared = prepare_pt2e(torch.export.export(m, (x,)).module(), quantizer)
        for _ in range(4):
            prepared(torch.randn(shape))
        converted = convert_pt2e(prepared)
    return converted, torch.export.export(converted, (x,)), shape


def assert_close(got, want):
    """Float outputs of dequantized layers: to float32 rounding on 99% of the elements (an
    integer sum is exact where torch's float one rounds), and every one within 1% of the
    output's range (a value at a rounding tie inside the model may land one step over)."""
    got, want = np.asarray(got).reshape(want.shape), want.detach().numpy()
    err = np.abs(got - want)
    span = float(np.ptp(want))
    assert np.mean(err <= 1e-5 * span) >= 0.99 and err.max() <= 1e-2 * span, err.max()


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_linear_and_conv_layers_become_integer_products(model, dynamic):
    """Each quantized linear (conv) is an int32 matmul (conv2d) of q - zp and the weight's
    int8 values, and prepare puts the matmuls on u8 x s8."""
    _, ep, _ = quantized(model, dynamic)
    graph = from_torch(ep)
    products = [n for n in graph.nodes if n.op in ("matmul", "conv2d")]
    want = {"cnn": ["conv2d", "conv2d", "matmul"], "block": ["matmul"] * 6}[model]
    assert sorted(n.op for n in products) == want
    for n in products:
        assert n.output.dtype == "int32" and n.inputs[1].is_const
        assert n.inputs[1].data.min() >= -128 and n.inputs[1].data.max() <= 127
    prepared = [(n.inputs[0].dtype, n.inputs[1].dtype) for n in prepare(graph).nodes
                if n.op == "matmul"]
    assert prepared == [("uint8", "int8")] * want.count("matmul")


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_quantized_models_import_as_torch_computes(model, dynamic):
    converted, ep, shape = quantized(model, dynamic)
    graph = from_torch(ep)
    for seed in range(2):
        x = torch.from_numpy(np.random.default_rng(seed).normal(0, 1, shape).astype(np.float32))
        assert_close(evaluate(graph, x.numpy())[0], converted(x))


def test_a_model_that_ends_quantized_is_within_one_step():
    """The block's output quantized to uint8: every value within one step of torch's."""
    converted, _, shape = quantized("block", False)
    ends_quantized = Fn(lambda s, x: q8(s.m(x), s=0.02, zp=128))
    ends_quantized.m = converted
    r = np.random.default_rng(4)
    x = torch.from_numpy(r.normal(0, 1, shape).astype(np.float32))
    graph = from_torch(torch.export.export(ends_quantized, (x,)))  # converted refuses .eval()
    for _ in range(2):
        x = torch.from_numpy(r.normal(0, 1, shape).astype(np.float32))
        got, want = evaluate(graph, x.numpy())[0], ends_quantized(x).numpy()
        diff = np.abs(got.reshape(want.shape).astype(np.int64) - want.astype(np.int64))
        assert diff.max() <= 1 and np.mean(diff == 0) >= 0.99


@pytest.mark.cc
@pytest.mark.parametrize("model, dynamic", [("cnn", False), ("block", True)])
def test_quantized_models_compile_as_torch_computes(model, dynamic):
    import looptune
    converted, ep, shape = quantized(model, dynamic)
    compiled = looptune.compile_model(from_torch(ep), target="cpu")
    x = torch.from_numpy(np.random.default_rng(3).normal(0, 1, shape).astype(np.float32))
    assert_close(compiled(x.numpy()), converted(x))


@pytest.mark.cc
@pytest.mark.slow  # two more model compiles
@pytest.mark.parametrize("model, dynamic", [("cnn", True), ("block", False)])
def test_the_other_quantized_models_compile_as_torch_computes(model, dynamic):
    test_quantized_models_compile_as_torch_computes(model, dynamic)


@pytest.mark.cc
def test_torch_compile_runs_the_quantized_model_whole():
    """No operator is left to PyTorch (a warning would say so)."""
    converted, _, shape = quantized("block", False)
    torch._dynamo.reset()
    fast = torch.compile(converted, backend="looptune")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("error", message="looptune")
        for seed in range(2):
            x = torch.from_numpy(np.random.default_rng(seed).normal(0, 1, shape)
                                 .astype(np.float32))
            assert_close(fast(x), converted(x))


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("fn, message", [
    (lambda s, x: q8(x, s=0.0), r"quantize_per_tensor.default x1 \(e.g. node "
     r"quantize_per_tensor\): the scale is 0.0; a quantization scale must be finite and nonzero"),
    (lambda s, x: Q.quantize_per_tensor(x, S, 0, -2 ** 31, 2 ** 31 - 1, torch.int32),
     r"node quantize_per_tensor\): quantization to torch.int32 is not supported"),
    (lambda s, x: Q.dequantize_per_tensor(q8(x), S, ZP, 0, 255, torch.uint8,
                                          out_dtype=torch.bfloat16),
     r"node dequantize_per_tensor\): dequantize to torch.bfloat16 is not supported"),
], ids=["zero_scale", "int32", "bfloat16_output"])
def test_unsupported_quantization_is_refused_naming_the_node(fn, message):
    x = torch.from_numpy(quantizable((2, 5)))
    with pytest.raises(ImportError_, match=message):
        from_torch(Fn(fn), (x,))
