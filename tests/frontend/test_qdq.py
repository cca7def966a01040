"""Pre-quantized (QDQ) models: read as a float graph plus their scales, and run on the int8
kernels, against ONNX Runtime running the same QDQ model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import ort_outputs
from tests.quantization.models import attention, ort_qdq, residual_block
from tvm_fuse.benchmarking.compare import onnxruntime_session
from tvm_fuse.calibrate import int8_pass
from tvm_fuse.frontend import relax_module
from tvm_fuse.frontend.qdq import read_qdq
from tvm_fuse.target import parse_target
from tvm_fuse.tuner.tasks import extract_tasks

SAMPLES = np.random.default_rng(1).standard_normal((8, 32, 16, 16)).astype(np.float32)
FEED = {"x": np.random.default_rng(2).standard_normal((1, 32, 16, 16)).astype(np.float32)}


def _op_types(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def _int8_patterns(model) -> list[str]:
    return sorted(k["pattern"] for k in model.fusion_report()["kernels"] if k["int8"])


@pytest.fixture(scope="module")
def qdq_block():
    return ort_qdq(residual_block(), SAMPLES)


def test_a_qdq_model_reads_as_floats_and_the_scales_of_its_pairs(qdq_block):
    floats, table = read_qdq(qdq_block)
    onnx.checker.check_model(floats)
    # ONNX Runtime removed both ReLUs (its u8 grid from 0 clips instead): a Clip stands in for
    # each; the last conv's pair stays, since its dequantized tensor is the graph output.
    assert _op_types(floats) == ["Conv", "Clip", "Conv", "Add", "Clip", "Conv", "QuantizeLinear", "DequantizeLinear"]
    scales = {n.input[0]: numpy_helper.to_array(i) for n in qdq_block.graph.node if n.op_type == "QuantizeLinear"
              for i in qdq_block.graph.initializer if i.name == n.input[1]}
    assert table.tensors["x"].scale == pytest.approx(float(scales["x"]))
    assert table.tensors["c2"].zero_point != 0  # conv2's output before the residual add: signed
    clipped = [n.output[0] for n in floats.graph.node if n.op_type == "Clip"]
    assert all(table.tensors[name].zero_point == 0 for name in clipped)
    # Weights are the values the codes stand for.
    weights = {i.name: numpy_helper.to_array(i) for i in floats.graph.initializer}
    conv1 = floats.graph.node[0]
    codes = {i.name: numpy_helper.to_array(i) for i in qdq_block.graph.initializer}
    np.testing.assert_allclose(weights[conv1.input[1]], codes["w1_quantized"] * codes["w1_scale"][:, None, None, None])


def test_a_model_without_qdq_is_left_alone():
    model = residual_block()
    assert read_qdq(model) == (model, None)


def test_qdq_convs_compile_to_int8_kernels_without_quantize_calls(qdq_block):
    """Compiles only: runs on any host."""
    model = tvm_fuse.build(qdq_block, "llvm -mcpu=cascadelake")
    assert _int8_patterns(model) == ["conv2d+bias", "conv2d+bias+clip", "conv2d+bias+sum+clip"]
    assert "vpdpbusd" in model.assembly()


@pytest.mark.vnni
@pytest.mark.parametrize("activations", ["uint8", "int8"])
def test_a_qdq_model_matches_onnx_runtime_running_it(activations):
    model = residual_block()
    qdq = ort_qdq(model, SAMPLES, activations)
    (ours,), (theirs,), (floats,) = tvm_fuse.build(qdq).run(None, FEED), ort_outputs(qdq, FEED), ort_outputs(model, FEED)
    step = float(numpy_helper.to_array(next(i for i in qdq.graph.initializer if i.name == "y_scale")))
    codes_apart = np.rint(np.abs(ours - theirs) / step)
    # Both give codes of the output's grid. Ours keeps conv2's output and x unrounded inside
    # the fused residual add (ONNX Runtime rounds each to its grid first), so a code here and
    # there differs by one, and ours stays the closer to the float model.
    assert codes_apart.max() <= 2 and (codes_apart == 0).mean() >= 0.7
    assert np.abs(ours - floats).mean() <= 1.05 * np.abs(theirs - floats).mean()


def _qdq_attention(tokens: int):
    samples = np.random.default_rng(1).standard_normal((8, tokens, 64)).astype(np.float32)
    return ort_qdq(attention(tokens), samples)


def test_pairs_only_int8_kernels_round_again_stay_in_the_graph():
    """A pair goes where an int8 kernel reads the tensor (it rounds it on the same grid) and
    stays for the softmax's probabilities (256 codes), the two rounded operands of q @ k^T
    and each product a bias is added to."""
    floats, table = read_qdq(_qdq_attention(16))
    kept = {n.input[0] for n in floats.graph.node if n.op_type == "QuantizeLinear"}
    assert {"weights", "q", "scores", "q_product", "o_product", "y_QuantizeLinear_Input"} <= kept
    assert "x" not in kept and "attended" not in kept  # read by dense layers only
    assert {"x", "attended"} <= set(table.tensors)
    assert "Softmax" in _op_types(floats) and "Clip" not in _op_types(floats)  # no clip nothing reads


@pytest.mark.vnni
@pytest.mark.parametrize("tokens", [2, 32])  # dense layers of few rows and of many
def test_a_qdq_attention_computes_its_pairs_as_written(tokens):
    """Every output code as ONNX Runtime computes the graph as written (its graph optimizations
    off). Reading the pairs' tensors unrounded, half the codes were one to four apart."""
    qdq = _qdq_attention(tokens)
    feed = {"x": np.random.default_rng(2).standard_normal((1, tokens, 64)).astype(np.float32)}
    (ours,), (written,) = tvm_fuse.build(qdq).run(None, feed), onnxruntime_session(qdq, 2, optimized=False).run(None, feed)
    step = float(numpy_helper.to_array(next(i for i in qdq.graph.initializer if i.name == "y_scale")))
    codes_apart = np.rint(np.abs(ours - written) / step)
    assert codes_apart.max() <= 1 and (codes_apart == 0).mean() >= 0.99


def _pair(name: str, scale: float, zero_point: int):
    nodes = [helper.make_node("QuantizeLinear", [name, f"{name}_s", f"{name}_z"], [f"{name}_q"]),
             helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_dq"])]
    return nodes, {f"{name}_s": np.float32(scale), f"{name}_z": np.uint8(zero_point)}


def _dequantized_weight(name: str, rows: int, columns: int, rng):
    node = helper.make_node("DequantizeLinear", [f"{name}_c", f"{name}_sc", f"{name}_zc"], [name], axis=1)
    return [node], {f"{name}_c": rng.integers(-127, 128, (rows, columns)).astype(np.int8),
                    f"{name}_sc": np.full(columns, 0.01, np.float32), f"{name}_zc": np.zeros(columns, np.int8)}


def test_a_dense_layer_after_a_clip_that_stands_for_a_pair_runs_in_int8():
    """Compiles only: runs on any host. A sigmoid's pair on a grid from 0 leaves a Clip, which
    the pipeline lowers to a maximum and a minimum, two bindings of one ONNX node: the dense
    layer reading it found no name for its input, hence no scale, and ran in fp32 (smart-turn's
    MLPs after their GELU)."""
    rng = np.random.default_rng(0)
    nodes, initializers = [], {}
    for part_nodes, part_initializers in (_pair("x", 0.03, 128), _dequantized_weight("w1", 64, 64, rng),
                                          _dequantized_weight("w2", 64, 64, rng)):
        nodes += part_nodes
        initializers.update(part_initializers)
    sigmoid_pair, sigmoid_scale = _pair("s", 1 / 255, 0)
    nodes += [helper.make_node("MatMul", ["x_dq", "w1"], ["h"]), helper.make_node("Sigmoid", ["h"], ["s"]),
              *sigmoid_pair, helper.make_node("MatMul", ["s_dq", "w2"], ["y"])]
    initializers.update(sigmoid_scale)
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 64])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    kernels = tvm_fuse.build(model, "llvm -mcpu=cascadelake").fusion_report()["kernels"]
    assert [k["int8"] for k in kernels] == [True, True]


def _graph(nodes, initializers, output_shape=(1, 16, 8, 8)):
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(output_shape))],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_fake_quantized_weights_fold_and_per_axis_activations_stay_float():
    """PyTorch's exporter writes weights as QuantizeLinear -> DequantizeLinear of a float
    constant; a per-channel activation pair has no one scale for a u8 tensor, so it runs as
    float math."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((16, 16, 1, 1)).astype(np.float32)
    w_scale = (np.abs(weight).max(axis=(1, 2, 3)) / 127).astype(np.float32)
    nodes = [
        helper.make_node("QuantizeLinear", ["w", "w_scale", "w_zero"], ["w_q"], axis=0),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w_dq"], axis=0),
        helper.make_node("QuantizeLinear", ["x", "x_scales", "x_zeros"], ["x_q"], axis=1),
        helper.make_node("DequantizeLinear", ["x_q", "x_scales", "x_zeros"], ["x_dq"], axis=1),
        helper.make_node("Conv", ["x_dq", "w_dq"], ["y"], name="conv"),
    ]
    model = _graph(nodes, {"w": weight, "w_scale": w_scale, "w_zero": np.zeros(16, np.int8),
                           "x_scales": np.full(16, 0.05, np.float32), "x_zeros": np.full(16, 128, np.uint8)})
    floats, table = read_qdq(model)
    assert table is None
    assert _op_types(floats) == ["QuantizeLinear", "DequantizeLinear", "Conv"]
    folded = {i.name: numpy_helper.to_array(i) for i in floats.graph.initializer}["w_dq"]
    expected = np.clip(np.rint(weight / w_scale[:, None, None, None]), -128, 127) * w_scale[:, None, None, None]
    np.testing.assert_allclose(folded, expected, rtol=1e-6)
    feed = {"x": rng.standard_normal((1, 16, 8, 8)).astype(np.float32)}
    np.testing.assert_allclose(tvm_fuse.build(model).run(None, feed)[0], ort_outputs(model, feed)[0],
                               rtol=1e-4, atol=1e-4)


def test_a_non_negative_tensor_gets_no_clip():
    """After a ReLU (and a max-pool of one) a u8 grid from 0 clips nothing the model's own ops
    do not: no Clip is added, so fusion sees the model's chain."""
    scale = {"s": np.float32(0.02), "z": np.uint8(0)}
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "s", "z"], ["r_q"]),
        helper.make_node("DequantizeLinear", ["r_q", "s", "z"], ["r_dq"]),
        helper.make_node("MaxPool", ["r_dq"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("QuantizeLinear", ["p", "s", "z"], ["p_q"]),
        helper.make_node("DequantizeLinear", ["p_q", "s", "z"], ["y"]),
    ]
    floats, table = read_qdq(_graph(nodes, scale, (1, 16, 4, 4)))
    assert _op_types(floats) == ["Relu", "MaxPool", "QuantizeLinear", "DequantizeLinear"]
    assert floats.graph.node[1].input[0] == "r" and table.tensors == {"r": table.tensors["r"]}


def test_tuning_a_qdq_model_measures_its_int8_kernels(qdq_block):
    target = parse_target("llvm -mcpu=cascadelake")
    imported = relax_module(qdq_block)
    tasks = extract_tasks(imported.mod, target, int8=int8_pass(qdq_block, imported, None, target, None))
    assert {t.workload.split("(")[0] for t in tasks} == {"tvm_fuse.conv_nchwc_int8"}
    assert sum(t.calls for t in tasks) == 3  # conv1 and conv2 share one workload


@pytest.mark.avx2  # runs sandybridge (AVX) code: an AVX2 host has it
def test_without_avx2_a_qdq_model_runs_as_its_float_graph(qdq_block):
    with pytest.warns(UserWarning, match="int8 kernels need AVX2"):
        model = tvm_fuse.build(qdq_block, "llvm -mcpu=sandybridge")
    assert _int8_patterns(model) == []
    (ours,), (theirs,) = model.run(None, FEED), ort_outputs(qdq_block, FEED)
    assert np.abs(ours - theirs).max() <= 0.05 * np.abs(theirs).max()  # ONNX Runtime rounds; we do not
