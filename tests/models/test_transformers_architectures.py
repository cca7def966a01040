"""Architectures from transformers, as a user exports them (torch's TorchScript exporter, opset
17), small enough to build in seconds, with random weights of unit gain and the library's zero
biases: each build matches ONNX Runtime within 1e-3 of the output's largest magnitude. Each
once failed us: MobileViT (heads of 36 channels whose projections have no bias: NaN),
SegFormer (5 heads of 12, Q padded to 64 columns: a build error), ViT (197 tokens: dense
layers in tiles of one row), wav2vec2 (strided and grouped 1-D convs), RegNet (grouped
convs). (EfficientNet's SAME padding: `tests/frontend/test_fixups.py`; a small one's outputs
vanish to denormals here.)"""

import io
import os
import warnings

import numpy as np
import onnx
import pytest

import tvm_fuse
from tests.conftest import assert_close, ort_outputs

pytestmark = pytest.mark.slow
transformers = pytest.importorskip("transformers")  # sentence-transformers (the test extra) brings it
torch = pytest.importorskip("torch")


def _architectures():
    t = transformers
    return {  # name -> (model, input name, input shape)
        "mobilevit": lambda: (t.MobileViTModel(t.MobileViTConfig(image_size=64)), "pixel_values", (1, 3, 64, 64)),
        "segformer": lambda: (t.SegformerModel(t.SegformerConfig(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1])),
                              "pixel_values", (1, 3, 64, 64)),
        "vit": lambda: (t.ViTModel(t.ViTConfig(image_size=224, patch_size=16, hidden_size=64, num_hidden_layers=1,
                                               num_attention_heads=2, intermediate_size=128)),
                        "pixel_values", (1, 3, 224, 224)),
        "wav2vec2": lambda: (t.Wav2Vec2Model(t.Wav2Vec2Config(
            hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=128, conv_dim=(32,) * 7,
            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)), "input_values", (1, 4000)),
        "regnet": lambda: (t.RegNetModel(t.RegNetConfig(hidden_sizes=[32, 64], depths=[1, 1], groups_width=16,
                                                        embedding_size=16)), "pixel_values", (1, 3, 64, 64)),
    }


class _FirstOutput(torch.nn.Module):
    def __init__(self, model, name):
        super().__init__()
        self.model, self.name = model, name

    def forward(self, x):
        return self.model(**{self.name: x}).last_hidden_state


def _exported(name):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    model, input_name, shape = _architectures()[name]()
    with torch.no_grad():  # unit gain: the library's initialization leaves some outputs at 1e-41
        for weight in (p for p in model.parameters() if p.ndim > 1):
            weight.normal_(0.0, weight[0].numel() ** -0.5)
    x = torch.randn(*shape)
    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about transformers' shape arithmetic
        torch.onnx.export(_FirstOutput(model.eval(), input_name), (x,), buffer, input_names=[input_name],
                          opset_version=17, dynamo=False)
    return onnx.load_from_string(buffer.getvalue()), {input_name: x.numpy()}


@pytest.mark.parametrize("name", ["mobilevit", "segformer", "vit", "wav2vec2", "regnet"])
def test_architecture_matches_onnxruntime(name):
    model, feed = _exported(name)
    compiled = tvm_fuse.build(model, "native")
    assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-3)
