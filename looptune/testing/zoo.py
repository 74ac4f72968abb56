"""The model zoo: public architectures as users bring them, built in code with seeded random
weights (nothing is downloaded), each with example inputs. `benchmarks/zoo.py` imports them
through both paths (torch.export and ONNX), checks looptune against torch and times them;
the tests use the small tier.

    model, inputs = build("mobilenet_v2")        # an eval-mode torch.nn.Module and a tuple
    ZOO["bert"].family, ZOO["bert"].tier

Needs PyTorch; torchvision for the CNNs and ViT, Hugging Face transformers for the
transformers and the speech encoders (`pip install 'looptune[zoo]'`). Transformers use small
configurations of the real classes, so that a run takes minutes, not hours.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class ZooModel:
    """One architecture of the zoo: how to build it, and its family, source and tier."""

    name: str
    family: str          # "cnn", "transformer", "audio"
    source: str          # "torchvision", "transformers", "torch"
    make: Callable       # () -> (torch.nn.Module, tuple of example inputs)
    tier: str = "full"   # "small": quick enough for CI


def _torch():
    import torch
    return torch


def _seeded():
    torch = _torch()
    torch.manual_seed(0)
    return torch


def _image(size=224):
    return (_seeded().randn(1, 3, size, size),)


def _tv(name: str, size: int = 224, **kwargs):
    def make():
        torch = _seeded()
        import torchvision
        model = getattr(torchvision.models, name)(weights=None, **kwargs).eval()
        _randomize_norms(model)
        return model, (torch.randn(1, 3, size, size),)
    return make


def _randomize_norms(model) -> None:
    """Batch norms with running statistics other than (0, 1): freshly built models have
    mean 0 and variance 1, which would hide a wrong fold."""
    torch = _torch()
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)


def _vit_small():
    torch = _seeded()
    from torchvision.models.vision_transformer import VisionTransformer
    model = VisionTransformer(image_size=224, patch_size=16, num_layers=4, num_heads=6,
                              hidden_dim=384, mlp_dim=1536).eval()
    torch.nn.init.normal_(model.heads.head.weight, std=0.02)  # torchvision zeroes the head
    return model, (torch.randn(1, 3, 224, 224),)


class _LastHidden:
    """Wraps a Hugging Face model so that forward returns the last hidden state tensor."""

    @staticmethod
    def wrap(hf_model):
        torch = _torch()

        class Wrapped(torch.nn.Module):
            """A Hugging Face model that returns its last hidden state only."""

            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                return self.inner(x, return_dict=False)[0]

        Wrapped.__name__ = type(hf_model).__name__
        return Wrapped(hf_model).eval()


def _hf_text(config_cls: str, model_cls: str, seq: int = 128, **config):
    def make():
        torch = _seeded()
        import transformers
        cfg = getattr(transformers, config_cls)(**config)
        model = getattr(transformers, model_cls)(cfg).eval()
        ids = torch.randint(0, cfg.vocab_size, (1, seq))
        return _LastHidden.wrap(model), (ids,)
    return make


def _whisper_encoder():
    torch = _seeded()
    import transformers
    cfg = transformers.WhisperConfig(d_model=256, encoder_layers=4, encoder_attention_heads=4,
                                     encoder_ffn_dim=1024, decoder_layers=1,
                                     decoder_attention_heads=4, num_mel_bins=80,
                                     max_source_positions=500)
    enc = transformers.WhisperModel(cfg).get_encoder().eval()
    return _LastHidden.wrap(enc), (torch.randn(1, 80, 1000),)


def _wav2vec2():
    torch = _seeded()
    import transformers
    cfg = transformers.Wav2Vec2Config(hidden_size=256, num_hidden_layers=4,
                                      num_attention_heads=4, intermediate_size=1024,
                                      do_stable_layer_norm=False)
    model = transformers.Wav2Vec2Model(cfg).eval()
    return _LastHidden.wrap(model), (torch.randn(1, 16000),)


def _m5():
    """M5 (Dai et al. 2017), the 1-D convolutional keyword spotter of torchaudio's tutorial,
    on one second of 8 kHz audio."""
    torch = _seeded()
    from torch import nn

    class M5(nn.Module):
        """The M5 network (named as in torchaudio's tutorial)."""

        def __init__(self, n_output=35, stride=16, n_channel=32):
            super().__init__()
            self.conv1 = nn.Conv1d(1, n_channel, kernel_size=80, stride=stride)
            self.bn1 = nn.BatchNorm1d(n_channel)
            self.pool1 = nn.MaxPool1d(4)
            self.conv2 = nn.Conv1d(n_channel, n_channel, kernel_size=3)
            self.bn2 = nn.BatchNorm1d(n_channel)
            self.pool2 = nn.MaxPool1d(4)
            self.conv3 = nn.Conv1d(n_channel, 2 * n_channel, kernel_size=3)
            self.bn3 = nn.BatchNorm1d(2 * n_channel)
            self.pool3 = nn.MaxPool1d(4)
            self.conv4 = nn.Conv1d(2 * n_channel, 2 * n_channel, kernel_size=3)
            self.bn4 = nn.BatchNorm1d(2 * n_channel)
            self.pool4 = nn.MaxPool1d(4)
            self.fc1 = nn.Linear(2 * n_channel, n_output)

        def forward(self, x):
            for conv, bn, pool in ((self.conv1, self.bn1, self.pool1),
                                   (self.conv2, self.bn2, self.pool2),
                                   (self.conv3, self.bn3, self.pool3),
                                   (self.conv4, self.bn4, self.pool4)):
                x = pool(torch.relu(bn(conv(x))))
            x = torch.nn.functional.avg_pool1d(x, x.shape[-1])
            x = self.fc1(x.permute(0, 2, 1))
            return torch.nn.functional.log_softmax(x, dim=2)

    model = M5().eval()
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm1d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
    return model, (torch.randn(1, 1, 8000),)


_BERT = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
             intermediate_size=1024, vocab_size=30522, max_position_embeddings=512)
_BERT_TINY = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=512, vocab_size=30522, max_position_embeddings=512)

_MODELS = [
    ZooModel("resnet50", "cnn", "torchvision", _tv("resnet50")),
    ZooModel("mobilenet_v2", "cnn", "torchvision", _tv("mobilenet_v2")),
    ZooModel("mobilenet_v3_small", "cnn", "torchvision", _tv("mobilenet_v3_small"),
             tier="small"),
    ZooModel("efficientnet_b0", "cnn", "torchvision", _tv("efficientnet_b0")),
    ZooModel("densenet121", "cnn", "torchvision", _tv("densenet121")),
    ZooModel("regnet_y_400mf", "cnn", "torchvision", _tv("regnet_y_400mf")),
    ZooModel("convnext_tiny", "cnn", "torchvision", _tv("convnext_tiny")),
    ZooModel("shufflenet_v2", "cnn", "torchvision", _tv("shufflenet_v2_x1_0")),
    ZooModel("squeezenet1_1", "cnn", "torchvision", _tv("squeezenet1_1")),
    ZooModel("vit_small", "transformer", "torchvision", _vit_small),
    ZooModel("bert", "transformer", "transformers", _hf_text("BertConfig", "BertModel", **_BERT)),
    ZooModel("bert_tiny", "transformer", "transformers",
             _hf_text("BertConfig", "BertModel", seq=64, **_BERT_TINY), tier="small"),
    ZooModel("distilbert", "transformer", "transformers",
             _hf_text("DistilBertConfig", "DistilBertModel", dim=256, n_layers=4, n_heads=4,
                      hidden_dim=1024)),
    ZooModel("roberta", "transformer", "transformers",
             _hf_text("RobertaConfig", "RobertaModel", **_BERT)),
    ZooModel("gpt2", "transformer", "transformers",
             _hf_text("GPT2Config", "GPT2Model", n_embd=256, n_layer=4, n_head=4,
                      n_positions=512)),
    ZooModel("t5_encoder", "transformer", "transformers",
             _hf_text("T5Config", "T5EncoderModel", d_model=256, d_kv=64, d_ff=1024,
                      num_layers=4, num_heads=4)),
    ZooModel("whisper_encoder", "audio", "transformers", _whisper_encoder),
    ZooModel("wav2vec2", "audio", "transformers", _wav2vec2),
    ZooModel("m5", "audio", "torch", _m5, tier="small"),
]

ZOO = {m.name: m for m in _MODELS}


def names(tier: str | None = None) -> list:
    """The zoo's model names, all of them or one tier's ("small", "full")."""
    return [m.name for m in _MODELS if tier is None or m.tier == tier]


def build(name: str):
    """(model, example_inputs) of zoo model `name`: an eval-mode torch.nn.Module with seeded
    random weights."""
    if name not in ZOO:
        raise KeyError(f"no zoo model {name!r}; the zoo has {', '.join(ZOO)}")
    torch = _torch()
    with torch.no_grad():
        return ZOO[name].make()


def export_onnx(model, inputs, path, opset: int = 18) -> str:
    """The model as an ONNX file through torch.onnx.export (the exporter users call), with
    static shapes."""
    torch = _torch()
    with torch.no_grad():
        torch.onnx.export(model, inputs, str(path), opset_version=opset, dynamo=True,
                          external_data=False)
    return str(path)
