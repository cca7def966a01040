"""Peeled row ends (`tvm_fuse.transform.peel_tile_tails`, in `tvm_fuse.pipeline`'s TIR lowering):
a kernel that TVM fails to lower or compile peeled is compiled unpeeled (`tvm_fuse.codegen`), and
the model still builds."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse


@pytest.mark.parametrize("length", [100, 21922])
def test_a_reflect_pad_of_a_long_row_builds_and_matches_numpy(length):
    # basic-pitch's CQT pads its audio so: TVM's LoopPartition failed on the peeled guard of its
    # int64 mirror-pad kernel (a mismatch of int32 and int64), and the model did not build.
    pad = 8
    nodes = [helper.make_node("Pad", ["x", "pads"], ["padded"], mode="reflect"),
             helper.make_node("Relu", ["x"], ["y"])]  # another kernel, lowered beside it
    graph = helper.make_graph(
        nodes, "reflect", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, length])],
        [helper.make_tensor_value_info("padded", TensorProto.FLOAT, [1, 1, length + 2 * pad]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, length])],
        [numpy_helper.from_array(np.array([0, 0, pad, 0, 0, pad], np.int64), "pads")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).standard_normal((1, 1, length)).astype(np.float32)
    padded, y = tvm_fuse.build(model).run(None, {"x": x})
    np.testing.assert_array_equal(padded, np.pad(x, [(0, 0), (0, 0), (pad, pad)], mode="reflect"))
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_a_flatten_of_a_symbolic_batch_builds_and_matches_numpy():
    # Found by the differential net: the peeled reshape kernel of [n, 4, 3, 2] -> [n, 24] made LLVM
    # add a vector of int32 to one of int64, and the model did not build, fused or not.
    graph = helper.make_graph([helper.make_node("Flatten", ["x"], ["y"], axis=1)], "flatten",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 3, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 24])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.random.default_rng(0).standard_normal((3, 4, 3, 2)).astype(np.float32)
    for fusion in (None, "all"):
        (y,) = tvm_fuse.build(model, disable_fusion=fusion).run(None, {"x": x})
        np.testing.assert_array_equal(y, x.reshape(3, 24))
