import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import ort_outputs, tiny_model
from tests.differential.cases import Case
from tvm_fuse import CompileError, InputError, UnsupportedOpsError
from tvm_fuse.frontend.importer import graph_inputs, set_input_shapes


def _one_node(node, initializers=()):
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_conversion_errors_name_the_node_and_op():
    shape = numpy_helper.from_array(np.array([3, 3], dtype=np.int64), "shape")
    model = _one_node(helper.make_node("Reshape", ["x", "shape"], ["y"], name="bad_reshape"), [shape])
    with pytest.raises(CompileError, match="node 'bad_reshape' \\(op Reshape, opset 17\\)"):
        tvm_fuse.build(model, "llvm -mcpu=skylake-avx512")


def test_a_shape_computed_from_symbolic_dims_asks_for_input_shapes_and_builds_with_them():
    """paddle2onnx's OCR models compute a Reshape's shape from Shape(x) with a symbolic batch:
    the error says which dims to fix and how; fixed, the model builds and runs."""
    nodes = [
        helper.make_node("Shape", ["x"], ["dims"]),
        helper.make_node("Gather", ["dims", "zero"], ["batch"], axis=0),
        helper.make_node("Concat", ["batch", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="flatten"),
    ]
    constants = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
                 numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 6])], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(CompileError, match=r"node 'flatten'.*symbolic dims \('x': \('n', 2, 3\)\).*input_shapes"):
        tvm_fuse.build(model, "llvm")
    x = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    (y,) = tvm_fuse.build(model, "llvm", input_shapes={"x": (2, 2, 3)}).run(None, {"x": x})
    np.testing.assert_array_equal(y, x.reshape(2, 6))


def test_initializers_listed_as_inputs_are_weights_not_inputs():
    model = tiny_model()
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 4]))
    assert [i.name for i in graph_inputs(model)] == ["x"]


def test_input_shapes_fix_symbolic_dims():
    fixed = set_input_shapes(tiny_model(), {"x": (8, 4)})
    assert graph_inputs(fixed)[0].shape == (8, 4)
    assert graph_inputs(tiny_model())[0].shape == ("batch", 4)


@pytest.mark.parametrize(
    "shapes, message",
    [
        ({"nope": (1, 4)}, "unknown input"),
        ({"x": (1, 4, 1)}, "rank 2"),
        ({"x": (2, 5)}, "fixed dim 4 at axis 1"),
        ({"x": (-1, 4)}, "negative dim -1"),
    ],
)
def test_bad_input_shapes_are_rejected(shapes, message):
    with pytest.raises(InputError, match=message):
        set_input_shapes(tiny_model(), shapes)


def _declaring(dims):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize(
    "dims, input_shapes, message",
    [
        ([1, 2**40], None, r"input 'x' \(1, 1099511627776\) has 1099511627776 elements.*axis 1"),
        ([1, 0, 4], None, r"input 'x' \(1, 0, 4\) has size 0 at axis 1"),
        (["n", 4], {"x": (0, 4)}, r"input 'x' \(0, 4\) has size 0 at axis 0"),
        (["n", 65536], {"x": (65536, 65536)}, r"more than the 2147483647 .*axis 0"),
    ],
)
def test_input_sizes_no_run_could_serve_are_refused_at_once(dims, input_shapes, message):
    """Before: a dim of 2^40 kept build() busy for minutes; a 0 failed deep in TVM's emit_te."""
    started = time.perf_counter()
    with pytest.raises(InputError, match=message):
        tvm_fuse.build(_declaring(dims), "llvm", input_shapes=input_shapes)
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("symbolic", [False, True])
def test_a_node_whose_output_is_empty_is_refused_naming_it(symbolic):
    """x[1:0]: TVM's compile failed on the static slice, and the symbolic one asked for a
    negative allocation at run time (std::bad_alloc)."""
    weights = {k: np.array([v], np.int64) for k, v in (("starts", 1), ("ends", 0), ("axes", 0), ("steps", 1))}
    case = Case([helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"], name="empty_slice")],
                {"x": np.ones((2, 3), np.float32)}, weights, opset=13)
    with pytest.raises(UnsupportedOpsError, match=r"Slice \(node 'empty_slice'.*its output would be empty"):
        tvm_fuse.build(case.model(symbolic), "llvm")


def test_a_shape_and_its_dims_as_graph_outputs_are_int64_tensors():
    # The import computes Shape of a symbolic input as a shape value, which no run returned.
    nodes = [helper.make_node("Shape", ["x"], ["shape"], name="shape"), helper.make_node("Relu", ["x"], ["y"], name="relu"),
             helper.make_node("Gather", ["shape", "zero"], ["rows"], name="rows")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                              [helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3]),
                               helper.make_tensor_value_info("rows", TensorProto.INT64, [])],
                              [numpy_helper.from_array(np.array(0, np.int64), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    feed = {"x": np.ones((4, 3), np.float32)}
    outputs = tvm_fuse.build(model).run(None, feed)
    for ours, reference in zip(outputs, ort_outputs(model, feed), strict=True):
        assert ours.dtype == reference.dtype and ours.shape == reference.shape and np.array_equal(ours, reference)
