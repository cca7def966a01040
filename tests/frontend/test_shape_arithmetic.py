"""Shape arithmetic of constants folded at import (frontend/shape_arithmetic.py): a Reshape to a
shape computed from a static Shape's dims, which TVM's converters compute at run time as a
tensor that a Reshape cannot take."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import assert_close, ort_outputs


def _reshape_to_computed_shape() -> onnx.ModelProto:
    """y = x transposed to [4, 2, 3], reshaped to [dims[0], dims[1] * dims[2]] read off its Shape."""
    constants = [numpy_helper.from_array(np.array(v, np.int64), name) for name, v in
                 [("order", [2, 0, 1]), ("zero", [0]), ("one", [1]), ("three", [3])]]
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "order"], ["dims"]),
        helper.make_node("Slice", ["dims", "zero", "one"], ["rows"]),
        helper.make_node("Slice", ["dims", "one", "three"], ["rest"]),
        helper.make_node("ReduceProd", ["rest"], ["columns"], keepdims=1),
        helper.make_node("Concat", ["rows", "columns"], ["target"], axis=0),
        helper.make_node("Reshape", ["t", "target"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "shape", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])], constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_a_reshape_to_a_shape_computed_from_static_dims_builds_and_matches():
    model = _reshape_to_computed_shape()
    feed = {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4)}
    compiled = tvm_fuse.build(model, "native")
    assert tuple(compiled.get_outputs()[0].shape) == (4, 6)
    assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=0)
