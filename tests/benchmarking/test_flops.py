"""FLOPs of Conv/Gemm/MatMul graphs against hand-computed counts."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvm_fuse.benchmarking.flops import model_flops


def _model(nodes, inputs, outputs, weights):
    initializers = [numpy_helper.from_array(np.zeros(shape, np.float32), name) for name, shape in weights.items()]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_conv_grouped_conv_and_gemm():
    model = _model(
        [
            helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c1"], ["r1"]),
            helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2], group=2),
            helper.make_node("Flatten", ["c2"], ["f"]),
            helper.make_node("Gemm", ["f", "w3"], ["y"], transB=1),
        ],
        {"x": [1, 3, 8, 8]}, ["y"],
        {"w1": [4, 3, 3, 3], "b1": [4], "w2": [4, 2, 3, 3], "w3": [10, 64]},
    )
    conv1 = (4 * 8 * 8) * (3 * 3 * 3)  # output elements x (C_in x kh x kw)
    conv2 = (4 * 4 * 4) * (2 * 3 * 3)  # stride 2: 4x4 outputs, 2 input channels per group
    gemm = (1 * 10) * 64  # [1, 64] @ [64, 10]
    assert model_flops(model) == 2 * (conv1 + conv2 + gemm) == 2 * 8704


def test_gemm_trans_a_and_batched_matmul():
    model = _model(
        [
            helper.make_node("Gemm", ["a", "w"], ["g"], transA=1),  # a [6, 2]: M=2, K=6
            helper.make_node("MatMul", ["x", "v"], ["y"]),  # [2, 3, 5] @ [5, 7]
        ],
        {"a": [6, 2], "x": [2, 3, 5]}, ["g", "y"],
        {"w": [6, 9], "v": [5, 7]},
    )
    assert model_flops(model) == 2 * (2 * 9 * 6 + 2 * 3 * 7 * 5)


def test_symbolic_dims_are_refused():
    model = _model([helper.make_node("MatMul", ["x", "v"], ["y"])], {"x": ["batch", 5]}, ["y"], {"v": [5, 7]})
    with pytest.raises(ValueError, match="static shapes"):
        model_flops(model)


def test_resnet50_is_about_4_gmacs():
    from tvm_fuse.benchmarking.models import named_model

    assert 2 * 4.0e9 < model_flops(named_model("resnet50")) < 2 * 4.2e9
