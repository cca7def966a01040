"""A float16 model computes in float32 (`frontend.half_as_float`), its inputs and outputs float16:
found on a real float16 model (slovorez's morpheme segmenter, bench/corpus.py), whose convs ran
as TVM's generic kernels, 37x slower than ONNX Runtime, and summed 768 float16 products in
float16, 1.1e-2 away from it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_fuse
from tests.conftest import ort_outputs
from tests.differential.cases import Case
from tvm_fuse.frontend import relax_module


def _half_model(op: str) -> Case:
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (2, 256, 12)).astype(np.float16)
    if op == "Conv":
        nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1]),
                 helper.make_node("Softmax", ["y"], ["z"], axis=1)]
        return Case(nodes, {"x": x}, {"w": rng.uniform(-0.1, 0.1, (64, 256, 3)).astype(np.float16)}, opset=13)
    return Case([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x},
                {"w": rng.uniform(-0.1, 0.1, (12, 64)).astype(np.float16)}, opset=13)


@pytest.mark.parametrize("op", ["Conv", "MatMul"])
def test_a_float16_model_matches_onnxruntime_within_an_ulp(op):
    case = _half_model(op)
    model = case.model()
    compiled = tvm_fuse.build(model, "llvm")
    ours, = compiled.run(None, case.inputs)
    reference, = ort_outputs(model, case.inputs)
    assert ours.dtype == np.float16 and [i.dtype for i in compiled.get_inputs()] == ["float16"]
    # float16 has 11 significant bits: one rounding of each is 2^-11 of its magnitude
    np.testing.assert_allclose(ours, reference, rtol=0, atol=2**-10 * float(np.abs(reference).max()))


def test_only_the_inputs_and_outputs_are_float16():
    main = relax_module(_half_model("Conv").model()).mod["main"]
    calls = [b.value for block in main.body.blocks for b in block.bindings if isinstance(b.value, relax.Call)]
    computed = [call for call in calls if call.op.name != "relax.astype"]
    assert computed and all(str(call.ty.dtype) == "float32" for call in computed)
    assert [str(call.ty.dtype) for call in calls if call.op.name == "relax.astype"] == ["float32", "float16"]


def test_float16_inside_a_branch_and_casts_to_float16_compute_in_float32():
    """An If's branch with a float16 constant, and a Cast to float16 in the middle of the graph."""
    then = helper.make_graph([helper.make_node("Add", ["h", "one"], ["out"])], "then_branch", [],
                             [helper.make_tensor_value_info("out", TensorProto.FLOAT16, [3])],
                             [numpy_helper.from_array(np.ones(3, np.float16), "one")])
    otherwise = helper.make_graph([helper.make_node("Neg", ["h"], ["out2"])], "else_branch", [],
                                  [helper.make_tensor_value_info("out2", TensorProto.FLOAT16, [3])])
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=otherwise)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                                           helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    compiled = tvm_fuse.build(model, "llvm")
    for condition in (True, False):
        feed = {"x": np.float32([0.5, -2, 3.25]), "c": np.array(condition)}
        (ours,), (reference,) = compiled.run(None, feed), ort_outputs(model, feed)
        assert ours.dtype == np.float16
        np.testing.assert_array_equal(ours, reference)
