"""Each fix-up keeps the model's values (checked with ONNX Runtime) and changes what it should."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import AVX512_TARGET, assert_close, ort_outputs
from tvm_fuse.frontend.fixups import (
    explicit_same_padding,
    fold_constant_of_shape,
    fold_shape_arithmetic,
    range_over_dim_to_cumsum,
)
from tvm_fuse.frontend.importer import set_input_shapes


def _model(nodes, inputs, output, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, [output], list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _scalar_fill_model():
    """y = x * ConstantOfShape([]) : a rank-0 fill, as torch exports BERT's mask path."""
    empty = numpy_helper.from_array(np.array([], np.int64), "empty")
    return _model(
        [
            helper.make_node("ConstantOfShape", ["empty"], ["two"], name="fill",
                             value=numpy_helper.from_array(np.array([2.0], np.float32))),
            helper.make_node("Mul", ["x", "two"], ["y"], name="mul"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3]),
        [empty],
    )


def _positions_model():
    """y = x + Range(0, Shape(x)[0], 1)[:, None] : positions over a dynamic batch."""
    consts = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array([1], np.int64), "axes"),
    ]
    return _model(
        [
            helper.make_node("Shape", ["x"], ["shape"], name="shape"),
            helper.make_node("Gather", ["shape", "zero"], ["n"], name="n"),
            helper.make_node("Range", ["zero", "n", "one"], ["positions"], name="range"),
            helper.make_node("Cast", ["positions"], ["positions_f"], name="cast", to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["positions_f", "axes"], ["column"], name="unsqueeze"),
            helper.make_node("Expand", ["column", "shape"], ["grid"], name="expand"),
            helper.make_node("Add", ["x", "grid"], ["y"], name="add"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3]),
        consts,
    )


@pytest.mark.parametrize(
    "make, fixup, removed_op",
    [(_scalar_fill_model, fold_constant_of_shape, "ConstantOfShape"),
     (_positions_model, range_over_dim_to_cumsum, "Range")],
)
def test_fixup_removes_the_op_and_keeps_values(make, fixup, removed_op):
    model = make()
    fixed = fixup(model)
    assert removed_op in [n.op_type for n in model.graph.node], "the input must not change"
    assert removed_op not in [n.op_type for n in fixed.graph.node]
    feed = {"x": np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)}
    assert_close(ort_outputs(fixed, feed), ort_outputs(model, feed), rtol=0)


def test_range_not_over_a_dim_is_left_alone():
    model = _positions_model()
    model.graph.node[1].input[0] = "x"  # Gather from data, not from a shape
    assert [n.op_type for n in range_over_dim_to_cumsum(model).graph.node] == [n.op_type for n in model.graph.node]


@pytest.mark.avx512
@pytest.mark.parametrize("make", [_scalar_fill_model, _positions_model])
@pytest.mark.parametrize("batch_shape", [None, (4, 3)])
def test_fixed_up_models_build_and_match_onnxruntime(make, batch_shape):
    model = make()
    compiled = tvm_fuse.build(model, AVX512_TARGET, input_shapes=batch_shape and {"x": batch_shape})
    feed = {"x": np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)}
    assert_close(compiled.run(None, feed), ort_outputs(model, feed))


def _paddle_reshape_model():
    """paddle2onnx's run-time reshape: [Shape(x)[0:1] as int32 -> int64, -1] -> Reshape(x),
    then a Squeeze at a negative axis (which crashed TVM's layout conversion)."""
    constants = {"start": [0], "end": [1], "axis": [0], "rest": [-1], "last": [-1]}
    return _model(
        [
            helper.make_node("Shape", ["x"], ["shape"], name="shape"),
            helper.make_node("Cast", ["shape"], ["shape32"], name="to_int32", to=TensorProto.INT32),
            helper.make_node("Slice", ["shape32", "start", "end", "axis"], ["batch32"], name="batch"),
            helper.make_node("Cast", ["batch32"], ["batch"], name="to_int64", to=TensorProto.INT64),
            helper.make_node("Concat", ["batch", "rest"], ["target"], name="target", axis=0),
            helper.make_node("Reshape", ["x", "target"], ["flat"], name="flatten"),
            helper.make_node("Unsqueeze", ["flat", "last"], ["column"], name="column"),
            helper.make_node("Squeeze", ["column", "last"], ["y"], name="squeeze"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4])],
        helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 12]),
        [numpy_helper.from_array(np.array(v, np.int64), name) for name, v in constants.items()],
    )


def test_shape_arithmetic_folds_where_input_shapes_make_it_static():
    model = _paddle_reshape_model()
    fixed = set_input_shapes(model, {"x": (2, 3, 4)})
    folded = fold_shape_arithmetic(fixed)
    assert [n.op_type for n in folded.graph.node if n.name in ("shape", "batch", "target")] == ["Constant"] * 3
    reshape = next(n for n in folded.graph.node if n.op_type == "Reshape")
    target = next(n for n in folded.graph.node if n.output[0] == reshape.input[1])
    assert numpy_helper.to_array(target.attribute[0].t).tolist() == [2, -1]
    # Without static shapes, nothing folds.
    assert [n.op_type for n in fold_shape_arithmetic(model).graph.node] == [n.op_type for n in model.graph.node]


@pytest.mark.avx512
def test_a_paddle_reshape_builds_and_matches_onnxruntime():
    model = _paddle_reshape_model()
    compiled = tvm_fuse.build(model, AVX512_TARGET, input_shapes={"x": (2, 3, 4)})
    feed = {"x": np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)}
    assert_close(compiled.run(None, feed), ort_outputs(model, feed))


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("size, kernel, stride", [(9, 3, 2), (8, 3, 2), (8, 1, 1), (7, 5, 1)])
def test_same_padding_becomes_the_convs_pads(mode, size, kernel, stride):
    """auto_pad SAME_* (odd padding before or after the rest) as explicit pads: ONNX Runtime's
    values, and the build has no pad kernel of its own: the conv is its only kernel."""
    rng = np.random.default_rng(0)
    model = _model(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", auto_pad=mode, kernel_shape=[kernel, kernel],
                          strides=[stride, stride])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, size, size])],
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, None, None]),
        [numpy_helper.from_array(rng.standard_normal((16, 16, kernel, kernel)).astype(np.float32) / 8, "w")])
    (conv,) = explicit_same_padding(model).graph.node
    assert {a.name for a in conv.attribute} == {"kernel_shape", "strides", "pads"}
    compiled = tvm_fuse.build(model, "native")
    assert [k["onnx_nodes"] for k in compiled.fusion_report()["kernels"]] == [["conv"]]
    x = rng.standard_normal((1, 16, size, size)).astype(np.float32)
    assert_close(compiled.run(None, {"x": x}), ort_outputs(model, {"x": x}))
