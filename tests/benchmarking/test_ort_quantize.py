"""ONNX Runtime's int8 reference model: the quantization scheme it asks ONNX Runtime for, its
closeness to fp32, and the old-opset graphs of the light models. Runs ONNX Runtime only, so on
any host."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import ort_outputs
from tests.quantization.models import residual_block
from tvm_fuse.benchmarking.compare import differences
from tvm_fuse.benchmarking.ort_quantize import ort_int8_model
from tvm_fuse.errors import InputError

SAMPLES = np.random.default_rng(1).standard_normal((8, 32, 16, 16)).astype(np.float32)


def _initializers(model) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _producers(model) -> dict[str, onnx.NodeProto]:
    return {output: node for node in model.graph.node for output in node.output}


def test_the_model_is_static_qdq_with_u8_activations_and_per_channel_s8_weights():
    block = residual_block()
    model = ort_int8_model(block, SAMPLES, "minmax")
    weights, producers = _initializers(model), _producers(model)
    ops = [n.op_type for n in model.graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops

    quantized = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert {weights[n.input[2]].dtype for n in quantized} == {np.dtype(np.uint8)}  # every activation in u8

    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    assert len(convs) == 3
    for conv, fp32_conv in zip(convs, (n for n in block.graph.node if n.op_type == "Conv")):
        weight = producers[conv.input[1]]  # DequantizeLinear(s8 weight, a scale and zero point per channel)
        assert weight.op_type == "DequantizeLinear"
        codes, scale, zero = (weights[name] for name in weight.input)
        channels = _initializers(block)[fp32_conv.input[1]].shape[0]
        assert codes.dtype == np.int8 and zero.dtype == np.int8
        assert scale.shape == zero.shape == (channels,) and len(np.unique(scale)) > 1
        assert {a.name: a.i for a in weight.attribute}.get("axis", 1) == 0  # along the output channels
        data = producers[conv.input[0]]
        assert data.op_type == "DequantizeLinear" and weights[data.input[2]].dtype == np.uint8


@pytest.mark.parametrize("method", ["minmax", "entropy", "percentile"])
def test_outputs_stay_close_to_fp32(method):
    block = residual_block()
    feed = {"x": np.random.default_rng(7).standard_normal((1, 32, 16, 16)).astype(np.float32)}
    _, relative = differences(ort_outputs(ort_int8_model(block, SAMPLES, method), feed), ort_outputs(block, feed))
    assert 0 < relative < 0.05  # int8, so never exact; within a few codes of the largest output


def _old_opset_residual():
    """Conv + Sum (a residual add) + Relu in opset 9 and IR version 3, whose graph inputs list
    the weights too: the shape of the onnx wheel's light models."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) / 8).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Sum", ["c", "x"], ["s"], name="sum"),
         helper.make_node("Relu", ["s"], ["y"], name="relu")],
        "old_residual",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 8, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 3
    return model


def test_old_opset_models_get_per_channel_weights_and_an_int8_residual_add():
    old = _old_opset_residual()
    model = ort_int8_model(old, np.random.default_rng(2).standard_normal((4, 8, 8, 8)).astype(np.float32), "minmax")
    assert next(o.version for o in model.opset_import if o.domain == "") >= 13
    assert [i.name for i in model.graph.input] == ["x"]
    producers = _producers(model)
    (add,) = [n for n in model.graph.node if n.op_type == "Add"]  # was Sum, which ONNX Runtime leaves in fp32
    assert all(producers[name].op_type == "DequantizeLinear" for name in add.input)
    feed = {"x": np.random.default_rng(3).standard_normal((1, 8, 8, 8)).astype(np.float32)}
    _, relative = differences(ort_outputs(model, feed), ort_outputs(old, feed))
    assert relative < 0.05


def test_a_table_is_refused_it_has_no_samples_to_calibrate_on(tmp_path):
    with pytest.raises(InputError, match="table of scales"):
        ort_int8_model(residual_block(), tmp_path / "block.calib.json")


def test_calibration_data_is_checked_like_tvm_fuses():
    with pytest.raises(InputError, match="calibration feed 1"):
        ort_int8_model(residual_block(), [{"x": np.zeros((1, 3, 16, 16), np.float32)}])
