"""MobileNetV2, ResNet-18 and a transformer encoder built with onnx.helper, against ONNX Runtime,
with the batch compiled as a dynamic dim and as a static one."""

import pytest

import tvm_fuse
from tests.conftest import (
    AVX512_TARGET,
    assert_close,
    assert_fully_fused,
    ort_outputs,
    random_inputs,
)
from tvm_fuse.benchmarking.models.built import mobilenet_v2, resnet18, transformer_encoder

pytestmark = [pytest.mark.avx512, pytest.mark.slow]

IMAGE = (3, 224, 224)


@pytest.mark.parametrize("build_model", [mobilenet_v2, resnet18], ids=["mobilenet_v2", "resnet18"])
def test_cnn_with_dynamic_batch_matches_onnxruntime(build_model):
    model = build_model()
    compiled = tvm_fuse.build(model, AVX512_TARGET)
    assert compiled.get_inputs()[0].shape == ("batch", *IMAGE)
    assert_fully_fused(model, compiled.fusion_report())
    for batch in (1, 2):
        feed = random_inputs({"input": (batch, *IMAGE)}, seed=batch)
        assert_close(compiled.run(None, feed), ort_outputs(model, feed))


def test_cnn_with_static_batch_matches_onnxruntime():
    model = mobilenet_v2()
    compiled = tvm_fuse.build(model, AVX512_TARGET, input_shapes={"input": (3, *IMAGE)})
    feed = random_inputs({"input": (3, *IMAGE)})
    assert_close(compiled.run(None, feed), ort_outputs(model, feed))


def test_transformer_encoder_with_dynamic_batch_and_sequence():
    model = transformer_encoder(seq_len="seq")
    compiled = tvm_fuse.build(model, AVX512_TARGET)
    for batch, seq in ((1, 128), (3, 16)):
        feed = random_inputs({"hidden_states": (batch, seq, 256)}, seed=seq)
        assert_close(compiled.run(None, feed), ort_outputs(model, feed))


def test_transformer_encoder_with_static_shapes():
    model = transformer_encoder(batch=2, seq_len=64)
    compiled = tvm_fuse.build(model, AVX512_TARGET)
    feed = random_inputs({"hidden_states": (2, 64, 256)})
    assert_close(compiled.run(None, feed), ort_outputs(model, feed))
