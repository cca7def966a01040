"""Models as torch exports them with dynamic axes (the TorchScript exporter, opset 17), built once
with their dims symbolic and run at several sizes against ONNX Runtime: the shape arithmetic
torch writes (`x.size(1)`, `head_dim ** 0.5`, `interpolate(size=y.shape[2:])`, position tables
sliced to the length) must build, and never give a wrong answer."""

import io
import warnings

import numpy as np
import onnx
import pytest

import tvm_fuse
from tests.conftest import assert_close, ort_outputs
from tvm_fuse import InputError

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional


class _Attention(nn.Module):
    """An encoder block: position ids sliced to the length (as BERT's), a mask, heads by view."""

    def __init__(self, width=32, heads=4, positions=16):
        super().__init__()
        self.heads = heads
        self.qkv, self.out, self.norm = nn.Linear(width, 3 * width), nn.Linear(width, width), nn.LayerNorm(width)
        self.positions = nn.Embedding(positions, width)
        self.register_buffer("position_ids", torch.arange(positions)[None])

    def forward(self, x, mask):
        batch, length, width = x.shape
        x = x + self.positions(self.position_ids[:, :length])
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in self.qkv(x).split(width, dim=-1))
        scores = q @ k.transpose(-1, -2) / (width // self.heads) ** 0.5 + (1.0 - mask[:, None, None, :].float()) * -1e4
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, width)
        return self.norm(x + self.out(y))[:, 0], x[:, -3:]


class _Decoder(nn.Module):
    """A U-Net step: a skip's size read from its shape for the upsampling."""

    def __init__(self):
        super().__init__()
        self.stem, self.down = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.project, self.head = nn.Conv2d(16, 8, 1), nn.Conv2d(16, 4, 3, padding=1)

    def forward(self, x):
        skip = F.relu(self.stem(x))
        up = F.interpolate(self.project(F.relu(self.down(skip))), size=skip.shape[2:], mode="bilinear")
        return self.head(torch.cat([skip, up], 1))


def _exported(module, example, axes):
    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on shape arithmetic
        torch.onnx.export(module.eval(), example, buffer, input_names=list(axes), dynamic_axes=axes,
                          opset_version=17, dynamo=False)
    return onnx.load_from_string(buffer.getvalue())


def _sentences(batch, length):
    mask = np.ones((batch, length), np.int64)
    mask[0, length // 2:] = 0
    return {"x": np.random.default_rng(length).standard_normal((batch, length, 32)).astype(np.float32), "mask": mask}


def test_an_attention_block_builds_once_for_every_length_within_its_positions(tmp_path):
    torch.manual_seed(0)
    example = tuple(torch.from_numpy(a) for a in _sentences(1, 7).values())
    model = _exported(_Attention(), example, {"x": {0: "batch", 1: "length"}, "mask": {0: "batch", 1: "length"}})
    compiled = tvm_fuse.build(model)
    for batch, length in [(1, 7), (2, 12), (1, 16)]:
        feed = _sentences(batch, length)
        assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-4)
    # Its 16 position ids are sliced to the length; ONNX Runtime fails past them, and so do we, by name.
    loaded = tvm_fuse.load(compiled.export(tmp_path / "model.so"))
    for model_ in (compiled, loaded):
        with pytest.raises(InputError, match="length=17.*at most 16"):
            model_.run(None, _sentences(1, 17))


def test_an_upsampling_to_a_skips_size_builds_once_for_every_image_size():
    torch.manual_seed(0)
    model = _exported(_Decoder(), (torch.randn(1, 3, 16, 19),), {"x": {0: "batch", 2: "height", 3: "width"}})
    compiled = tvm_fuse.build(model)
    for shape in [(1, 3, 16, 19), (2, 3, 11, 11), (1, 3, 8, 30)]:
        feed = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
        assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-4)
