"""Index ops with their indices checked (`frontend.indices`): in range, negative ones included,
they give ONNX Runtime's outputs; one outside its axis is an error naming the node, at build for
constant indices and at run time for computed ones, where TVM's kernels read or wrote past the
tensor."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import AVX512_TARGET, assert_close, ort_outputs
from tvm_fuse.errors import ModelLoadError

X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

# op -> attributes, in-range indices (negative ones too), the same with one (index, axis size)
# outside its axis, updates
CASES = {
    "Gather": ({"axis": 1}, [[2, -3], [0, -1]], [[2, -3], [3, 0]], (3, 3), None),
    "GatherElements": ({"axis": 2}, np.full((2, 3, 1), -4), np.full((2, 3, 1), 4), (4, 4), None),
    "GatherND": ({}, [[1, -3], [0, 2]], [[1, -3], [-3, 2]], (-3, 2), None),
    "ScatterElements": ({"axis": 0}, np.full((1, 3, 4), -1), np.full((1, 3, 4), 2), (2, 2),
                        np.ones((1, 3, 4), np.float32)),
    "ScatterND": ({}, [[1, -1], [0, 0]], [[1, -1], [0, 3]], (3, 3), np.ones((2, 4), np.float32)),
}


def _model(op: str, attrs: dict, updates, indices, fed: bool = False, batch="b", opset: int = 13):
    """y = op(x, i[, u]) with x (`batch`, 3, 4); the `indices` a constant, or fed with their
    shape where `fed`."""
    inputs = ["x", "i"] + (["u"] if updates is not None else [])
    feeds = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 4])]
    if fed:
        feeds.append(helper.make_tensor_value_info("i", TensorProto.INT64, np.shape(indices)))
    if updates is not None:
        feeds.append(helper.make_tensor_value_info("u", TensorProto.FLOAT, list(updates.shape)))
    weights = [] if fed else [numpy_helper.from_array(np.array(indices, np.int64), "i")]
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"], name="lookup", **attrs)], "g", feeds,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _feed(indices, updates) -> dict:
    feed = {"x": X, "i": np.array(indices, np.int64)}
    return feed if updates is None else {**feed, "u": updates}


@pytest.mark.parametrize("op", sorted(CASES))
def test_indices_computed_at_run_time_are_checked(op):
    attrs, good, bad, _, updates = CASES[op]
    model = _model(op, attrs, updates, good, fed=True)
    compiled = tvm_fuse.build(model, AVX512_TARGET)
    assert_close(compiled.run(None, _feed(good, updates)), ort_outputs(model, _feed(good, updates)))
    with pytest.raises(IndexError, match=f"{op} node 'lookup': an index lies outside the axis it indexes"):
        compiled.run(None, _feed(bad, updates))


@pytest.mark.parametrize("op", sorted(CASES))
def test_constant_indices_are_checked_at_build(op):
    attrs, good, bad, (index, size), updates = CASES[op]
    model = _model(op, attrs, updates, good, batch=2)
    feed = {"x": X} if updates is None else {"x": X, "u": updates}
    assert_close(tvm_fuse.build(model, AVX512_TARGET).run(None, feed), ort_outputs(model, feed))
    expected = rf"^{op} node 'lookup' has the constant index {index} into an axis of size {size} \(ONNX allows"
    with pytest.raises(ModelLoadError, match=expected):
        tvm_fuse.build(_model(op, attrs, updates, bad, batch=2), AVX512_TARGET)


def test_scatter_of_opset_10_is_checked_too():
    attrs, good, bad, _, updates = CASES["ScatterElements"]
    model = _model("Scatter", attrs, updates, good, fed=True, opset=10)
    compiled = tvm_fuse.build(model, AVX512_TARGET)
    assert_close(compiled.run(None, _feed(good, updates)), ort_outputs(model, _feed(good, updates)))
    with pytest.raises(IndexError, match="Scatter node 'lookup'"):
        compiled.run(None, _feed(bad, updates))


def test_constant_indices_into_a_symbolic_axis_are_checked_at_run_time():
    attrs, _, bad, _, _ = CASES["GatherND"]  # -3 into the batch, of size 2 in this run
    compiled = tvm_fuse.build(_model("GatherND", attrs, None, bad), AVX512_TARGET)
    assert compiled.run(None, {"x": X[[0, 1, 0]]})[0].shape == (2, 4)
    with pytest.raises(IndexError, match="GatherND node 'lookup'"):
        compiled.run(None, {"x": X})


def test_a_position_table_read_past_its_rows_is_an_error():
    """torch's `table[arange(seq)]` (Shape -> Gather -> Range -> Gather) with seq a symbolic
    dim: a sequence longer than the table's 8 rows read other memory as its last rows."""
    table = numpy_helper.from_array(np.arange(32, dtype=np.float32).reshape(8, 4), "table")
    scalars = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("zero", 0), ("one", 1))]
    nodes = [helper.make_node("Shape", ["ids"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
             helper.make_node("Range", ["zero", "seq", "one"], ["positions"]),
             helper.make_node("Gather", ["table", "positions"], ["y"], name="position_embedding")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "seq"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [table, *scalars])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = tvm_fuse.build(model, AVX512_TARGET)
    for seq in (3, 8):
        feed = {"ids": np.zeros((1, seq), np.int64)}
        assert_close(compiled.run(None, feed), ort_outputs(model, feed))
    with pytest.raises(IndexError, match="Gather node 'position_embedding'"):
        compiled.run(None, {"ids": np.zeros((1, 9), np.int64)})
