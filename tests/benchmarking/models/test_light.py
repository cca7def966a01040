"""The onnx wheel's light models (weights redrawn from a seed) against ONNX Runtime."""

import numpy as np
import pytest

import tvm_fuse
from tests.conftest import AVX512_TARGET, assert_close, assert_fully_fused, ort_outputs
from tvm_fuse.benchmarking.models.light import LIGHT_MODELS, light_model

pytestmark = [pytest.mark.avx512, pytest.mark.slow]


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_matches_onnxruntime(name):
    model = light_model(name)
    compiled = tvm_fuse.build(model, AVX512_TARGET)
    (data,) = compiled.get_inputs()
    feed = {data.name: np.random.default_rng(1).standard_normal(data.shape).astype(np.float32)}
    assert_close(compiled.run(None, feed), ort_outputs(model, feed))
    if name in ("resnet50", "inception_v1"):
        assert_fully_fused(model, compiled.fusion_report())


@pytest.mark.parametrize("name", ["resnet50", "inception_v2", "vgg19"])
def test_redrawn_weights_give_informative_outputs(name):
    """The shipped placeholders saturate the softmax; redrawn weights must not, or comparing
    outputs would prove nothing."""
    model = light_model(name)
    (data,) = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    shape = [d.dim_value for d in data.type.tensor_type.shape.dim]
    feed = {data.name: np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    (probs,) = ort_outputs(model, feed)
    assert np.isfinite(probs).all()
    assert probs.max() < 0.999, "softmax saturated: one-hot outputs"
    assert not any(n.op_type == "ConstantOfShape" for n in model.graph.node)


def test_reseeding_is_deterministic_and_seed_dependent():
    a, b, c = light_model("squeezenet", 0), light_model("squeezenet", 0), light_model("squeezenet", 1)
    assert a.SerializeToString() == b.SerializeToString()
    assert a.SerializeToString() != c.SerializeToString()


@pytest.mark.parametrize("name", ["shufflenet", "inception_v1"])
def test_a_fixed_batch_1_model_runs_at_batch_8(name):
    """input_shapes changes the batch the export fixed (its Reshapes' shape constants pin it:
    a classifier's [1, 1024], a channel shuffle's [1, 4, 28, 56, 56]; inception_v1 reshapes
    a weight to [1000, 1024], which must stay). The reference is ONNX Runtime on the exported
    model, one image at a time."""
    model = light_model(name)
    (data,) = tvm_fuse.build(model, AVX512_TARGET).get_inputs()
    compiled = tvm_fuse.build(model, AVX512_TARGET, input_shapes={data.name: (8, *data.shape[1:])})
    batch = np.random.default_rng(1).standard_normal((8, *data.shape[1:])).astype(np.float32)
    reference = np.concatenate([ort_outputs(model, {data.name: image[None]})[0] for image in batch])
    assert_close(compiled.run(None, {data.name: batch}), [reference])
