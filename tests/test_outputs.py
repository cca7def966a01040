"""A run's outputs: views of the VM's own tensors, copies where they would share memory with an
input, a weight or another output; either way the caller's alone."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import AVX512_TARGET
from tvm_fuse.outputs import Spans, tensor_span, unshared


def _model(nodes, outputs, initializers=()):
    graph = helper.make_graph(nodes, "outputs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 64]) for name in outputs],
                              list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _aligned(x: np.ndarray) -> np.ndarray:
    """`x` at a 64-byte boundary, which a run takes without a copy."""
    raw = np.empty(x.nbytes + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    aligned = raw[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
    aligned[...] = x
    return aligned


X = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
WEIGHT = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)


def test_an_output_the_run_computed_is_returned_without_a_copy_and_kept_by_later_runs():
    model = tvm_fuse.build(_model([helper.make_node("Relu", ["x"], ["y"])], ["y"]), AVX512_TARGET)
    (first,) = model.run(None, {"x": X})
    assert not first.flags.owndata  # a view of the run's own tensor
    kept = first.copy()
    for _ in range(3):
        model.run(None, {"x": -X})
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(first, np.maximum(X, 0))


@pytest.mark.parametrize("aligned", [True, False], ids=["passed-as-it-is", "copied-into-a-buffer"])
def test_an_output_that_is_the_input_is_a_copy(aligned):
    model = tvm_fuse.build(_model([helper.make_node("Identity", ["x"], ["y"])], ["y"]), AVX512_TARGET)
    x = _aligned(X) if aligned else X
    (y,) = model.run(None, {"x": x})
    assert not np.shares_memory(y, x)
    model.run(None, {"x": -X})  # which an unaligned input's buffer holds next
    np.testing.assert_array_equal(y, X)
    y[...] = 0  # the caller's to change
    np.testing.assert_array_equal(x, X)
    np.testing.assert_array_equal(model.run(None, {"x": X})[0], X)


def test_an_output_that_is_a_weight_is_a_copy():
    nodes = [helper.make_node("Identity", ["w"], ["y"]), helper.make_node("Relu", ["x"], ["z"])]
    model = tvm_fuse.build(_model(nodes, ["y", "z"], [numpy_helper.from_array(WEIGHT, "w")]), AVX512_TARGET)
    y, _ = model.run(None, {"x": X})
    y[...] = 0
    np.testing.assert_array_equal(model.run(None, {"x": X})[0], WEIGHT)


def test_two_outputs_of_one_tensor_are_two_arrays():
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Identity", ["y"], ["z"])]
    y, z = tvm_fuse.build(_model(nodes, ["y", "z"]), AVX512_TARGET).run(None, {"x": X})
    assert not np.shares_memory(y, z)
    np.testing.assert_array_equal(y, z)


def _span(array: np.ndarray) -> tuple[int, int]:
    return array.ctypes.data, array.ctypes.data + array.nbytes


def test_spans_merge_what_they_touch_and_find_any_overlap():
    memory = np.zeros(100, np.uint8)
    spans = Spans(_span(a) for a in [memory[40:50], memory[0:10], memory[20:30]])
    spans.add(*_span(memory[8:22]))  # joins the first two
    assert len(spans.starts) == 2
    assert all(spans.overlaps(*_span(memory[a:b])) for a, b in [(25, 26), (45, 60), (5, 95)])
    assert not any(spans.overlaps(*_span(memory[a:b])) for a, b in [(30, 40), (50, 100), (0, 0)])


def test_unshared_copies_only_what_shares_memory():
    memory = np.zeros(100, np.float32)
    own, of_input, of_weight = np.ones(4, np.float32), memory[0:4], memory[50:54]
    outputs = [(a, _span(a)) for a in (own, of_input, of_weight, own)]
    result = unshared(outputs, Spans([_span(memory[0:10])]), Spans([_span(memory[50:60])]))
    assert result[0] is own
    assert all(not np.shares_memory(r, memory) for r in result[1:3])
    assert not np.shares_memory(result[3], own)  # the same tensor twice: the second a copy


def test_a_tensor_span_is_the_memory_numpy_reads():
    """The VM's outputs are views into its storage at an offset (DLPack's byte_offset)."""
    import tvm

    storage = tvm.runtime.tensor(np.arange(64, dtype=np.float32))
    array = np.from_dlpack(storage)[16:32]
    view = tvm.runtime.from_dlpack(array)
    assert tensor_span(view, array.nbytes) == _span(array)
