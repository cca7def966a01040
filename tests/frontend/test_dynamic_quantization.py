"""ONNX Runtime's dynamic quantization (frontend/dynamic_quantization.py): models that
`onnxruntime.quantization.quantize_dynamic` writes (ConvInteger, DynamicQuantizeLinear,
com.microsoft.DynamicQuantizeLSTM) against ONNX Runtime on them, and a tensor of zeros quantized
as ONNX Runtime quantizes it."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnxruntime.quantization import QuantType, quantize_dynamic

import tvm_fuse
from tests.conftest import assert_close, conv_model, dense_model
from tests.frontend.test_recurrent import _recurrent_model
from tvm_fuse.benchmarking.compare import onnxruntime_session

# Products of 8-bit codes are exact in float32, so outputs differ from ONNX Runtime's by the float
# rounding of what surrounds them (sigmoid, sums in another order) unless a value lands on a
# rounding boundary of its codes; these seeded models have none there.
RTOL = 1e-4


def _quantized(model: onnx.ModelProto, tmp_path, op: str, **options) -> onnx.ModelProto:
    source, target = tmp_path / "float.onnx", tmp_path / "dynamic.onnx"
    onnx.save(model, source)
    quantize_dynamic(source, target, op_types_to_quantize=[op], **options)
    return onnx.load(target)


def _reference(model: onnx.ModelProto, feed: dict) -> list[np.ndarray]:
    """ONNX Runtime on one thread: on more, its LSTM quantizes each thread's batch rows apart."""
    return onnxruntime_session(model, num_threads=1).run(None, feed)


@pytest.mark.parametrize("options", [
    {},
    {"direction": "bidirectional"},
    {"direction": "reverse", "states": False, "bias": False},
    {"batch": 1, "hidden": 8, "seq": 7},
    {"seq": 1},
    {"clip": 1.5},  # a dense layer per step, not the sequence kernel
], ids=str)
def test_a_dynamically_quantized_lstm_matches_onnx_runtime(options, tmp_path):
    model, feed = _recurrent_model("LSTM", **options)
    quantized = _quantized(model, tmp_path, "LSTM")
    assert [(n.domain, n.op_type) for n in quantized.graph.node] == [("com.microsoft", "DynamicQuantizeLSTM")]
    compiled = tvm_fuse.build(quantized, "native")
    assert_close(compiled.run(None, feed), _reference(quantized, feed), RTOL)
    # The sequence kernel's integer products leave one dense kernel, the input's over all steps;
    # with a clip, a dense layer per step.
    dense = [k for k in compiled.fusion_report()["kernels"] if k["pattern"].startswith("dense")]
    assert (len(dense) == 1) == ("clip" not in options)


@pytest.mark.vnni
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_a_dynamically_quantized_lstm_takes_its_input_product_on_int8_codes(direction, tmp_path):
    """x's codes times W's, summed in s32 by an int8 kernel and then scaled, as ONNX Runtime
    takes the product (the fp32 kernel read W dequantized: 4x its bytes, 3x the time)."""
    model, feed = _recurrent_model("LSTM", direction=direction, features=16, hidden=8, seq=6)
    quantized = _quantized(model, tmp_path, "LSTM")
    compiled = tvm_fuse.build(quantized, "native")
    assert_close(compiled.run(None, feed), _reference(quantized, feed), RTOL)
    (dense,) = [k for k in compiled.fusion_report()["kernels"] if k["pattern"].startswith("dense")]
    assert dense["precision"] == "int8"


@pytest.mark.parametrize("weight_type, per_channel, stride, group", [
    (QuantType.QInt8, False, 1, 1),
    (QuantType.QUInt8, True, 2, 1),  # uint8 weights, about a zero point
    (QuantType.QInt8, True, 1, 4),
], ids=str)
def test_a_conv_integer_model_matches_onnx_runtime(weight_type, per_channel, stride, group, tmp_path):
    model = conv_model((1, 16, 14, 18), 32, kernel=3, stride=stride, group=group)
    quantized = _quantized(model, tmp_path, "Conv", weight_type=weight_type, per_channel=per_channel)
    assert "ConvInteger" in [n.op_type for n in quantized.graph.node]
    feed = {"x": np.random.default_rng(1).standard_normal((1, 16, 14, 18)).astype(np.float32)}
    assert_close(tvm_fuse.build(quantized, "native").run(None, feed), _reference(quantized, feed), RTOL)


@pytest.mark.parametrize("per_channel", [False, True])
def test_a_matmul_integer_model_matches_onnx_runtime_in_one_dense_kernel(per_channel, tmp_path):
    quantized = _quantized(dense_model((6,), 64, 48), tmp_path, "MatMul", per_channel=per_channel)
    assert "MatMulInteger" in [n.op_type for n in quantized.graph.node]
    feed = {"x": np.random.default_rng(2).standard_normal((6, 64)).astype(np.float32)}
    compiled = tvm_fuse.build(quantized, "native")
    assert_close(compiled.run(None, feed), _reference(quantized, feed), RTOL)
    # The product and the Cast of its int32 result to float: one dense kernel, no int32 between.
    product = next(n.name for n in quantized.graph.node if n.op_type == "MatMulInteger")
    kernel = next(k for k in compiled.fusion_report()["kernels"] if product in k["onnx_nodes"])
    assert kernel["pattern"].startswith("dense"), kernel


def _integer_product_model(op: str, x_shape, weight: np.ndarray, x_zero_point, w_zero_point, **attrs):
    """x (uint8, a graph input) -> `op` with a constant int8 weight and zero points -> y (int32)."""
    constants = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(x_zero_point, "xz"),
                 numpy_helper.from_array(w_zero_point, "wz")]
    graph = helper.make_graph([helper.make_node(op, ["x", "w", "xz", "wz"], ["y"], name="product", **attrs)], "int",
                              [helper.make_tensor_value_info("x", TensorProto.UINT8, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)], constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("op, per_channel", [("ConvInteger", False), ("ConvInteger", True),
                                             ("MatMulInteger", True)], ids=str)
def test_an_integer_product_is_exact(op, per_channel):
    """Its int32 output equals the reference's exactly: a 3x3 stride-1 conv, which Winograd's
    rounding once put 1 apart in 6828 of 15360 outputs, runs as a direct conv. (ONNX Runtime's
    ConvInteger takes one weight zero point; ONNX's reference evaluator checks one per channel.)"""
    rng = np.random.default_rng(3)
    channels = 32 if op == "ConvInteger" else 40
    w_zero_point = rng.integers(-3, 4, channels if per_channel else ()).astype(np.int8)
    if op == "ConvInteger":
        x_shape, weight = (1, 16, 20, 24), rng.integers(-128, 128, (channels, 16, 3, 3)).astype(np.int8)
        model = _integer_product_model(op, x_shape, weight, np.array(131, np.uint8), w_zero_point,
                                       kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    else:
        x_shape, weight = (7, 96), rng.integers(-128, 128, (96, channels)).astype(np.int8)
        model = _integer_product_model(op, x_shape, weight, np.array(120, np.uint8), w_zero_point)
    feed = {"x": rng.integers(0, 256, x_shape).astype(np.uint8)}
    ours = tvm_fuse.build(model, "native").run(None, feed)[0]
    by_onnx = op == "ConvInteger" and per_channel
    reference = (ReferenceEvaluator(model) if by_onnx else onnxruntime_session(model, 1)).run(None, feed)[0]
    assert ours.dtype == np.int32
    np.testing.assert_array_equal(ours, reference)


def _dynamic_quantize_linear_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero_point"], name="quantize")], "dql",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [2, 3]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("zero_point", TensorProto.UINT8, [])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("x", [
    np.zeros((2, 3), np.float32),  # ONNX's formula divides by a scale of 0; ONNX Runtime takes 1
    np.array([[-1.0, 0.5, 2.0], [0.25, -0.75, 3.5]], np.float32),
    np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32),  # all positive: a zero point of 0
], ids=["zeros", "mixed", "positive"])
def test_dynamic_quantize_linear_equals_onnx_runtime(x):
    model = _dynamic_quantize_linear_model()
    ours = tvm_fuse.build(model, "native").run(None, {"x": x})
    reference = _reference(model, {"x": x})
    for a, b in zip(ours, reference):
        np.testing.assert_array_equal(a, b)
    assert np.isfinite(ours[1]).all()
