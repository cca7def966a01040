"""Architectures from transformers, as a user exports them (torch's TorchScript exporter, opset
17), small enough to build in seconds, with random weights of unit gain and the library's zero
biases: each build matches ONNX Runtime within 1e-3 of the output's largest magnitude. Each
once failed us: MobileViT (heads of 36 channels whose projections have no bias: NaN),
SegFormer (5 heads of 12, Q padded to 64 columns: a build error), ViT (197 tokens: dense
layers in tiles of one row), wav2vec2 (strided and grouped 1-D convs), RegNet (grouped
convs), BERT (transformers 5's attention: not fused), ConvNeXt (7x7 tokens: dense layers in
tiles of one row). (EfficientNet's SAME padding: `tests/frontend/test_fixups.py`; a small one's outputs
vanish to denormals here.)"""

import io
import os
import warnings

import onnx
import pytest

import tvm_fuse
from tests.conftest import assert_close, ort_outputs

pytestmark = pytest.mark.slow
transformers = pytest.importorskip("transformers")  # sentence-transformers (the test extra) brings it
torch = pytest.importorskip("torch")


def _image(size):
    return {"pixel_values": torch.randn(1, 3, size, size)}


def _sentences():
    """Two sentences of 24 tokens, the second padded after 10."""
    mask = torch.ones(2, 24, dtype=torch.long)
    mask[1, 10:] = 0
    return {"input_ids": torch.randint(5, 1000, (2, 24)), "attention_mask": mask}


def _architectures():
    t = transformers
    return {  # name -> (model, its inputs)
        "mobilevit": lambda: (t.MobileViTModel(t.MobileViTConfig(image_size=64)), _image(64)),
        "segformer": lambda: (t.SegformerModel(t.SegformerConfig(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1])),
                              _image(64)),
        "vit": lambda: (t.ViTModel(t.ViTConfig(image_size=224, patch_size=16, hidden_size=64, num_hidden_layers=1,
                                               num_attention_heads=2, intermediate_size=128)), _image(224)),
        "wav2vec2": lambda: (t.Wav2Vec2Model(t.Wav2Vec2Config(
            hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=128, conv_dim=(32,) * 7,
            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)), {"input_values": torch.randn(1, 4000)}),
        "regnet": lambda: (t.RegNetModel(t.RegNetConfig(hidden_sizes=[32, 64], depths=[1, 1], groups_width=16,
                                                        embedding_size=16)), _image(64)),
        "bert": lambda: (t.BertModel(t.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                  intermediate_size=128)), _sentences()),
        "convnext": lambda: (t.ConvNextModel(t.ConvNextConfig(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1])),
                             _image(224)),
    }


class _FirstOutput(torch.nn.Module):
    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *inputs):
        return self.model(**dict(zip(self.names, inputs))).last_hidden_state


def _exported(name):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    model, inputs = _architectures()[name]()
    with torch.no_grad():  # unit gain: the library's initialization leaves some outputs at 1e-41
        for weight in (p for p in model.parameters() if p.ndim > 1):
            weight.normal_(0.0, weight[0].numel() ** -0.5)
    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about transformers' shape arithmetic
        torch.onnx.export(_FirstOutput(model.eval(), list(inputs)), tuple(inputs.values()), buffer,
                          input_names=list(inputs), opset_version=17, dynamo=False)
    return onnx.load_from_string(buffer.getvalue()), {k: v.numpy() for k, v in inputs.items()}


@pytest.mark.parametrize("name", ["mobilevit", "segformer", "vit", "wav2vec2", "regnet", "bert", "convnext"])
def test_architecture_matches_onnxruntime(name):
    model, feed = _exported(name)
    compiled = tvm_fuse.build(model, "native")
    assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-3)


def test_bert_runs_each_attention_block_as_one_kernel():
    """transformers 5 exports its default attention (torch's scaled_dot_product_attention) with a
    mask of -inf and the softmax's NaNs set to 0 after it."""
    report = tvm_fuse.build(_exported("bert")[0], "native").fusion_report()
    assert [k["pattern"] for k in report["kernels"]].count("attention") == 2


def test_segformer_moves_tokens_through_its_mix_ffn_conv_in_one_copy_each_way():
    """Its Mix-FFN transposes tokens [B, HW, C] to an image for a depthwise conv and back: the
    layout transforms at the blocked conv's borders move them."""
    report = tvm_fuse.build(_exported("segformer")[0], "native").fusion_report()
    moved = {f["onnx_node"] for f in report["folded"] if f["reason"].startswith("no kernel of its own: moved")}
    mix_ffn = [u["onnx_node"] for u in report["unfused"] + report["folded"]
               if "/mlp/dwconv/" in u["onnx_node"] and u["op_type"] in ("Transpose", "Reshape")]
    assert len(mix_ffn) >= 8 and set(mix_ffn) <= moved  # 4 stages: Transpose and Reshape each way
