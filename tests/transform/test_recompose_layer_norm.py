"""RecomposeLayerNorm: a layer norm written out op by op (ONNX before opset 17) runs as one
layer-norm kernel, in the forms exporters write, and matches ONNX Runtime; other forms are
left as they are, and match too."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import assert_close, ort_outputs

WIDTH = 64


def _written_out(square="Pow", root="Sqrt", axis=-1, shape=(2, 7, WIDTH)):
    """torch's LayerNorm at opset 14 (square="Pow", root="Sqrt"), or the `x * x` and
    `reciprocal square root` forms other exporters write."""
    rng = np.random.default_rng(0)
    width = shape[axis]
    along = (width,) if axis == -1 else (width, 1)  # broadcast along the normalized axis
    constants = [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
                 numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
                 numpy_helper.from_array(rng.standard_normal(along).astype(np.float32), "gamma"),
                 numpy_helper.from_array(rng.standard_normal(along).astype(np.float32), "beta")]
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], name="mean", axes=[axis]),
             helper.make_node("Sub", ["x", "mean"], ["d"], name="sub"),
             helper.make_node("Pow", ["d", "two"], ["sq"], name="pow") if square == "Pow"
             else helper.make_node("Mul", ["d", "d"], ["sq"], name="square"),
             helper.make_node("ReduceMean", ["sq"], ["var"], name="variance", axes=[axis]),
             helper.make_node("Add", ["var", "eps"], ["padded"], name="add_eps")]
    if root == "Sqrt":
        nodes += [helper.make_node("Sqrt", ["padded"], ["std"], name="sqrt"),
                  helper.make_node("Div", ["d", "std"], ["normed"], name="div")]
    else:
        nodes += [helper.make_node("Sqrt", ["padded"], ["std"], name="sqrt"),
                  helper.make_node("Reciprocal", ["std"], ["inv"], name="reciprocal"),
                  helper.make_node("Mul", ["d", "inv"], ["normed"], name="mul_inv")]
    nodes += [helper.make_node("Mul", ["normed", "gamma"], ["scaled"], name="mul_gamma"),
              helper.make_node("Add", ["scaled", "beta"], ["y"], name="add_beta")]
    graph = helper.make_graph(nodes, "layer_norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _layer_norm_kernels(model) -> int:
    return sum(1 for k in model.fusion_report()["unfused"] if k["onnx_node"] == "add_beta" and "nn.layer_norm" in k["reason"])


@pytest.mark.parametrize("square", ["Pow", "Mul"])
def test_torchs_written_out_layer_norm_runs_as_one_kernel(square):
    model = _written_out(square)
    compiled = tvm_fuse.build(model, "native")
    report = compiled.fusion_report()
    assert report["kernel_calls"] == 1 and _layer_norm_kernels(compiled) == 1
    reasons = {u["onnx_node"]: u["reason"] for u in report["unfused"]}
    assert reasons["variance"] == "computed in the kernel of node add_beta (Add)"
    x = (np.random.default_rng(1).standard_normal((2, 7, WIDTH)) * 3 + 1).astype(np.float32)
    assert_close(compiled.run(None, {"x": x}), ort_outputs(model, {"x": x}), rtol=1e-5)


@pytest.mark.parametrize("variant", [{"root": "Reciprocal"}, {"axis": 1, "shape": (2, WIDTH, 7)}])
def test_other_forms_are_left_alone_and_still_match(variant):
    """A reciprocal of a square root is not the rsqrt the pass knows; a norm over another axis
    than the last is not a layer norm of ours."""
    model = _written_out(**variant)
    compiled = tvm_fuse.build(model, "native")
    assert _layer_norm_kernels(compiled) == 0 and compiled.fusion_report()["kernel_calls"] > 1
    shape = variant.get("shape", (2, 7, WIDTH))
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    assert_close(compiled.run(None, {"x": x}), ort_outputs(model, {"x": x}), rtol=1e-5)


@pytest.mark.parametrize("steps", [37, 64])
def test_an_instance_norm_runs_as_a_layer_norm_kernel_of_any_width(steps):
    """torch's GroupNorm with a group per channel (wav2vec2's first feature conv) exports as
    InstanceNormalization, which TVM imports as mean, variance, sqrt and divide: one layer
    norm over the time steps (3199 there, no whole vectors), then the per-channel scale and
    offset."""
    rng = np.random.default_rng(3)
    constants = [numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "scale"),
                 numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "bias")]
    graph = helper.make_graph(
        [helper.make_node("InstanceNormalization", ["x", "scale", "bias"], ["y"], name="norm", epsilon=1e-5)],
        "instance_norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 8, steps))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 8, steps))], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    compiled = tvm_fuse.build(model, "native")
    assert any("nn.layer_norm" in u["reason"] for u in compiled.fusion_report()["unfused"])
    x = (rng.standard_normal((1, 8, steps)) * 3 + 1).astype(np.float32)
    assert_close(compiled.run(None, {"x": x}), ort_outputs(model, {"x": x}), rtol=1e-5)
