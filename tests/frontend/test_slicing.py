"""Slice whose starts or ends are expressions of symbolic dims (`frontend.slicing`): ONNX's
negative indices and clamping, as ONNX Runtime slices, with and without input_shapes; and an
empty slice into a Concat (`fixups.drop_empty_concat_inputs`)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import ort_outputs
from tvm_fuse.errors import UnsupportedOpsError

INT64_MAX = 2**63 - 1
FEED = {"x": np.arange(14, dtype=np.float32).reshape(2, 7)}


def _index(name: str, index, nodes: list, initializers: list) -> None:
    """`name` := index: an int, or ("dim", k) for the symbolic width plus k, as torch writes
    `x.size(1) + k` (Shape -> Gather -> Add -> Unsqueeze); ("tensor", k) with the width as a
    1-element tensor."""
    if isinstance(index, int):
        initializers.append(numpy_helper.from_array(np.array([index], np.int64), name))
        return
    initializers.append(numpy_helper.from_array(np.array(index[1], np.int64), f"{name}_k"))
    scalar = index[0] == "dim"
    nodes.append(helper.make_node("Add", ["width", f"{name}_k"], [f"{name}_s" if scalar else name]))
    if scalar:
        nodes.append(helper.make_node("Unsqueeze", [f"{name}_s", "zero"], [name]))


def _slice_model(start, end, width_as_tensor=False):
    """z = concat(x, x[:, start:end]) along the symbolic axis 1. `width_as_tensor`: the width
    gathered as a 1-element tensor, so that the indices are tensors computed at run time."""
    one = np.array([1] if width_as_tensor else 1, np.int64)
    initializers = [numpy_helper.from_array(one, "one"),
                    numpy_helper.from_array(np.array([0], np.int64), "zero"),
                    numpy_helper.from_array(np.array([1], np.int64), "axes")]
    nodes = [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Gather", ["shape", "one"], ["width"])]
    _index("start", start, nodes, initializers)
    _index("end", end, nodes, initializers)
    nodes += [helper.make_node("Slice", ["x", "start", "end", "axes"], ["y"], name="cut"),
              helper.make_node("Concat", ["x", "y"], ["z"], axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "w"])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


# Each took the wrong columns (or none) before: TVM slices past the end and ignores a negative index.
@pytest.mark.parametrize("start,end", [
    (("dim", -2), INT64_MAX),   # sign unknown: sliced at run time
    (("dim", -3), -1),
    (-3, ("dim", 0)),           # x[:, -3:w]
    (1, ("dim", -1)),
    (("dim", -5), ("dim", 10)),  # an end past the width
    (-100, ("dim", -1)),        # a start before the first column
    (("dim", -3), 100),
    (("dim", -10), ("dim", -1)),
])
@pytest.mark.parametrize("shapes", [None, {"x": (2, 7)}], ids=["symbolic", "static"])
def test_symbolic_starts_and_ends_slice_as_onnx_runtime(start, end, shapes):
    model = _slice_model(start, end)
    ours = tvm_fuse.build(model, input_shapes=shapes).run(None, FEED)[0]
    reference = ort_outputs(model, FEED)[0]
    assert ours.shape == reference.shape and np.array_equal(ours, reference)


def test_indices_computed_at_run_time_slice_as_onnx_runtime():
    # TVM's FoldConstant left dynamic_strided_slice's shape function half-emitted: not built.
    model = _slice_model(("tensor", -3), INT64_MAX, width_as_tensor=True)
    ours = tvm_fuse.build(model).run(None, FEED)[0]
    assert np.array_equal(ours, ort_outputs(model, FEED)[0])


def test_an_empty_slice_is_left_out_of_its_concat_where_shapes_are_static():
    model = _slice_model(("dim", 0), INT64_MAX)  # x[:, w:]: empty for every width
    ours = tvm_fuse.build(model, input_shapes={"x": (2, 7)}).run(None, FEED)[0]
    assert np.array_equal(ours, ort_outputs(model, FEED)[0])
    with pytest.raises(UnsupportedOpsError, match=r"'cut'.*would be empty"):
        tvm_fuse.build(model)  # symbolic: refused by name, not built into a kernel of 2^63 columns
