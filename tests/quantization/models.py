"""Small conv models for the int8 tests: a stem conv and a residual block, as in ResNet."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def residual_block(channels: int = 32, size: int = 16, seed: int = 0):
    """x -> conv3x3+relu (a) -> conv3x3 + x -> relu (b) -> conv1x1 (y): every conv int8-able."""
    rng = np.random.default_rng(seed)

    def weight(name, out, inp, k):
        return numpy_helper.from_array((rng.standard_normal((out, inp, k, k)) * np.sqrt(2 / (inp * k * k)))
                                       .astype(np.float32), name)

    def bias(name, out):
        return numpy_helper.from_array((rng.standard_normal(out) * 0.1).astype(np.float32), name)

    c = channels
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["a"], name="relu1"),
        helper.make_node("Conv", ["a", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "x"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["b"], name="relu2"),
        helper.make_node("Conv", ["b", "w3", "b3"], ["y"], name="conv3"),
    ]
    weights = [weight("w1", c, c, 3), bias("b1", c), weight("w2", c, c, 3), bias("b2", c),
               weight("w3", 2 * c, c, 1), bias("b3", 2 * c)]
    graph = helper.make_graph(nodes, "residual_block",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2 * c, size, size])],
                              weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model
