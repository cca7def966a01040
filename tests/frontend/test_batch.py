"""input_shapes on a fixed batch: `frontend.batch.rebatch` frees the constants that pin it,
refuses the graphs it cannot, and ONNX Runtime agrees with the result."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import ort_outputs
from tvm_fuse import InputError
from tvm_fuse.frontend.importer import set_input_shapes


def _model(nodes, initializers, out_shape):
    graph = helper.make_graph(
        nodes, "fixed_batch", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(np.asarray(v), name) for name, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _flatten_then_scale():
    """x[1, 2, 3] -> Reshape [1, 6] (pins the batch) -> Mul by a [1, 6] weight that was
    reshaped from [6] by a Reshape with a leading 1 too (not the batch: must stay)."""
    return _model(
        [helper.make_node("Reshape", ["x", "flat"], ["h"], name="flatten"),
         helper.make_node("Reshape", ["w", "flat"], ["w2"], name="weight_row"),
         helper.make_node("Mul", ["h", "w2"], ["y"], name="scale")],
        {"flat": np.array([1, 6], np.int64), "w": np.arange(6, dtype=np.float32)}, [1, 6])


def test_the_batch_reshape_is_freed_and_the_weight_reshape_kept():
    model = _flatten_then_scale()
    rebatched = set_input_shapes(model, {"x": (4, 2, 3)})
    assert [d.dim_value for d in rebatched.graph.output[0].type.tensor_type.shape.dim] == [4, 6]
    x = np.random.default_rng(0).standard_normal((4, 2, 3)).astype(np.float32)
    (ours,) = ort_outputs(rebatched, {"x": x})
    reference = np.concatenate([ort_outputs(model, {"x": row[None]})[0] for row in x])
    np.testing.assert_allclose(ours, reference, rtol=1e-6)


def test_a_node_that_pins_the_batch_is_named():
    # A shape computed from constants: [1, -1] would silently fold a batch of 4 into one row.
    model = _model(
        [helper.make_node("Concat", ["one", "rest"], ["shape"], name="shape", axis=0),
         helper.make_node("Reshape", ["x", "shape"], ["y"], name="flatten")],
        {"one": np.array([1], np.int64), "rest": np.array([-1], np.int64)}, [1, 6])
    with pytest.raises(InputError, match=r"node 'flatten' \(Reshape\) pins the batch of input 'x' to 1"):
        set_input_shapes(model, {"x": (4, 2, 3)})


def test_a_batch_the_graph_contradicts_is_refused():
    # A Gemm with a fixed [1, 6] addend in a broadcast the new batch breaks: shape inference says so.
    model = _model(
        [helper.make_node("Reshape", ["x", "flat"], ["h"], name="flatten"),
         helper.make_node("Concat", ["h", "row"], ["y"], name="stack", axis=0)],
        {"flat": np.array([1, 6], np.int64), "row": np.zeros((1, 7), np.float32)}, [2, 6])
    with pytest.raises(InputError, match="shape inference"):
        set_input_shapes(model, {"x": (4, 2, 3)})


def test_only_the_batch_of_a_fixed_shape_may_change():
    with pytest.raises(InputError, match="fixed dim 2 at axis 1.*batch \\(axis 0\\)"):
        set_input_shapes(_flatten_then_scale(), {"x": (1, 3, 2)})
