"""LowerRowwise: layer norms and softmaxes over the last axis run as our vectorized kernels and
match ONNX Runtime; softmaxes of any width, layer norms of a width the vector width divides
(another stays TVM's, and matches too)."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import assert_close, ort_outputs
from tvm_fuse.frontend import relax_module
from tvm_fuse.ir_names import KERNEL_ATTR
from tvm_fuse.pipeline import optimize
from tvm_fuse.target import parse_target


def _layer_norm_model(shape, epsilon=1e-12):
    rng = np.random.default_rng(0)
    width = shape[-1]
    graph = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"], name="norm", axis=-1, epsilon=epsilon)],
        "layer_norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), "gamma"),
         numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), "beta")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _softmax_model(shape, axis=-1):
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], name="softmax", axis=axis)], "softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _ours(model, target="llvm -mcpu=skylake-avx512", kernel="nn.layer_norm") -> bool:
    optimized = optimize(relax_module(model).mod, parse_target(target))
    return any(isinstance(f, tvm.tirx.PrimFunc) and f.attrs and f.attrs.get(KERNEL_ATTR) == kernel
               for _, f in optimized.functions_items())


@pytest.mark.parametrize("shape", [(2, 7, 64), (128, 384), (3, 32)])
def test_a_layer_norm_runs_as_our_kernel_and_matches_onnx_runtime(shape):
    model = _layer_norm_model(shape)
    assert _ours(model) and _ours(model, "llvm -mcpu=haswell")  # 16 or 8 lanes divide each width
    x = (np.random.default_rng(1).standard_normal(shape) * 4 + 2).astype(np.float32)
    assert_close(tvm_fuse.build(model, "native").run(None, {"x": x}), ort_outputs(model, {"x": x}), rtol=1e-5)


def test_a_layer_norm_of_a_width_the_lanes_do_not_divide_runs_as_ours_too():
    model = _layer_norm_model((4, 20), epsilon=1e-5)
    assert _ours(model)
    x = np.random.default_rng(1).standard_normal((4, 20)).astype(np.float32)
    assert_close(tvm_fuse.build(model, "native").run(None, {"x": x}), ort_outputs(model, {"x": x}), rtol=1e-5)


@pytest.mark.parametrize("shape", [(1, 12, 128, 128), (2, 3, 16), (4, 100), (3, 7)])
def test_a_softmax_runs_as_our_kernel_and_matches_onnx_runtime(shape):
    model = _softmax_model(shape)
    assert _ours(model, kernel="nn.softmax")
    x = (np.random.default_rng(1).standard_normal(shape) * 8).astype(np.float32)
    assert_close(tvm_fuse.build(model, "native").run(None, {"x": x}), ort_outputs(model, {"x": x}), rtol=1e-5)


def test_a_softmax_over_another_axis_stays_tvms():
    model = _softmax_model((4, 32, 16), axis=1)
    assert not _ours(model, kernel="nn.softmax")
    x = np.random.default_rng(1).standard_normal((4, 32, 16)).astype(np.float32)
    assert_close(tvm_fuse.build(model, "native").run(None, {"x": x}), ort_outputs(model, {"x": x}), rtol=1e-5)


def _attention_scores_model():
    """softmax(scores * 0.125 + mask) over the last axis, the mask broadcast over heads and rows."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["scores", "scale"], ["scaled"], name="scale"),
         helper.make_node("Add", ["scaled", "mask"], ["masked"], name="mask"),
         helper.make_node("Softmax", ["masked"], ["y"], name="softmax", axis=-1)], "attention",
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [2, 4, 32, 32]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, [2, 1, 1, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 32, 32])],
        [numpy_helper.from_array(np.array(0.125, np.float32), "scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_attention_scaling_and_mask_run_in_the_softmax_kernel():
    model = _attention_scores_model()
    rng = np.random.default_rng(2)
    feed = {"scores": (rng.standard_normal((2, 4, 32, 32)) * 8).astype(np.float32),
            "mask": np.where(rng.random((2, 1, 1, 32)) < 0.3, -1e4, 0.0).astype(np.float32)}
    ours = tvm_fuse.build(model, "native")
    assert_close(ours.run(None, feed), ort_outputs(model, feed), rtol=1e-5)
    report = ours.fusion_report()
    assert report["kernel_calls"] == 1
    reasons = {entry["onnx_node"]: entry["reason"] for entry in report["unfused"]}
    assert reasons["scale"] == reasons["mask"] == "computed in the kernel of node softmax (Softmax)"


def _embeddings_model(residual_output: bool = False):
    """BERT's embeddings: word rows gathered by id, plus position rows, plus a residual input,
    then a layer norm. `residual_output`: the sum is also a graph output (read twice)."""
    rng = np.random.default_rng(3)
    words, width = 50, 32
    nodes = [helper.make_node("Gather", ["word_table", "ids"], ["word"], name="word_gather", axis=0),
             helper.make_node("Add", ["word", "positions"], ["embedded"], name="position_add"),
             helper.make_node("Add", ["embedded", "residual"], ["summed"], name="residual_add"),
             helper.make_node("LayerNormalization", ["summed", "gamma", "beta"], ["y"], name="norm", axis=-1,
                              epsilon=1e-12)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 7, width])]
    if residual_output:
        outputs.append(helper.make_tensor_value_info("summed", TensorProto.FLOAT, [2, 7, width]))
    graph = helper.make_graph(
        nodes, "embeddings",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 7]),
         helper.make_tensor_value_info("residual", TensorProto.FLOAT, [2, 7, width])], outputs,
        [numpy_helper.from_array(rng.standard_normal((words, width)).astype(np.float32), "word_table"),
         numpy_helper.from_array(rng.standard_normal((1, 7, width)).astype(np.float32), "positions"),
         numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), "gamma"),
         numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), "beta")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("residual_output", [False, True])
def test_gathers_and_adds_before_a_layer_norm_run_in_its_kernel(residual_output):
    """The gather (its negative indices counted from the end), both adds and the norm: one
    kernel, unless the sum is read elsewhere too; the ids' check (`frontend.indices`) before it."""
    model = _embeddings_model(residual_output)
    rng = np.random.default_rng(4)
    feed = {"ids": rng.integers(0, 50, (2, 7)).astype(np.int64),
            "residual": rng.standard_normal((2, 7, 32)).astype(np.float32)}
    feed["ids"][0, 0] = -3  # ONNX Gather counts a negative index from the end
    ours = tvm_fuse.build(model, "native")
    assert_close(ours.run(None, feed), ort_outputs(model, feed), rtol=1e-5)
    report = ours.fusion_report()
    reasons = {entry["onnx_node"]: entry["reason"] for entry in report["unfused"]}
    joined = "computed in the kernel of node norm (LayerNormalization)"
    if residual_output:
        assert reasons["residual_add"] != joined
    else:
        assert reasons["position_add"] == reasons["residual_add"] == joined
        assert reasons["word_gather"] == "no pattern of the table contains Gather (checked_indices); it runs as its own kernel"
        assert report["kernel_calls"] == 2


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_a_softmax_of_one_row_is_left_to_the_generic_kernel(op):
    """A 1-D input has no row loop for the rowwise schedule to parallelize (it raised)."""
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], axis=0)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    feed = {"x": np.linspace(-3, 3, 5, dtype=np.float32)}
    assert_close(tvm_fuse.build(model, "llvm").run(None, feed), ort_outputs(model, feed))
