"""torch.compile(model, backend="looptune"): MLP, CNN and transformer block against eager;
an operator looptune lacks stays in PyTorch; training and bad options are refused."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from looptune.runtime import have_compiler  # noqa: E402

pytestmark = pytest.mark.skipif(not have_compiler(), reason="needs a C compiler")


def compiled_matches_eager(model, *inputs, atol=1e-4):
    """Twice: the second call, on new values, runs the compiled code without compiling."""
    torch._dynamo.reset()
    model = model.eval()
    fast = torch.compile(model, backend="looptune")
    with torch.no_grad():
        for xs in (inputs, [torch.randn_like(x) for x in inputs]):
            want, got = model(*xs), fast(*xs)
            assert type(got) is type(want) and got.dtype == want.dtype
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=atol)


class Block(torch.nn.Module):
    """Pre-norm transformer block: attention (scaled_dot_product_attention) and an MLP."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).split(d, dim=-1)
        q, k, v = (y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for y in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.n2(x))))


def test_mlp_cnn_and_transformer_block_match_eager():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    compiled_matches_eager(mlp, torch.randn(4, 32))
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 5))
    with torch.no_grad():  # non-trivial batch-norm statistics
        cnn[1].running_mean.uniform_(-0.5, 0.5)
        cnn[1].running_var.uniform_(0.5, 2.0)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="looptune")  # no operator left in PyTorch
        compiled_matches_eager(cnn, torch.randn(2, 3, 16, 16))
    compiled_matches_eager(Block(), torch.randn(2, 8, 32), atol=2e-4)


def test_the_compiled_code_runs_on_new_inputs_and_uses_tuned_records(tmp_path):
    from looptune.graph import compile as compile_mod
    calls = []
    real = compile_mod.compile_model

    def spy(graph, database=None, *a, **k):
        calls.append(database)
        return real(graph, database, *a, **k)

    torch.manual_seed(1)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()).eval()
    compile_mod.compile_model = spy
    try:
        torch._dynamo.reset()
        fast = torch.compile(mlp, backend="looptune", options={"work_dir": str(tmp_path)})
        with torch.no_grad():
            for _ in range(3):
                x = torch.randn(5, 8)
                np.testing.assert_allclose(fast(x).numpy(), mlp(x).numpy(), rtol=1e-5,
                                           atol=1e-6)
    finally:
        compile_mod.compile_model = real
    assert len(calls) == 1 and calls[0] is not None  # compiled once, with the work dir's records


def test_an_operator_looptune_lacks_stays_in_pytorch_with_one_line():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 8)

        def forward(self, x):
            h = torch.atan2(torch.relu(self.a(x)), x + 2.0)  # no atan2 in looptune
            return self.b(h).sigmoid()

    from looptune.graph import compile as compile_mod
    calls = []
    real = compile_mod.compile_model
    compile_mod.compile_model = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            compiled_matches_eager(M(), torch.randn(3, 16))
    finally:
        compile_mod.compile_model = real
    lines = [str(x.message) for x in w if "looptune" in str(x.message)]
    assert lines == ["looptune: aten.atan2.default (1 node(s)) stays in PyTorch"]
    assert len(calls) == 2  # the parts before and after it


def test_training_and_unknown_options_are_refused_clearly():
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 4))
    torch._dynamo.reset()
    fast = torch.compile(mlp, backend="looptune")
    with pytest.raises(Exception, match="serves inference.*torch.no_grad"):
        fast(torch.randn(2, 4))
    torch._dynamo.reset()
    fast = torch.compile(mlp, backend="looptune", options={"workdir": "x"})
    with torch.no_grad(), pytest.raises(Exception, match="unknown option.*workdir.*work_dir"):
        fast(torch.randn(2, 4))
