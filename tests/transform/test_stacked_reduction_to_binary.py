"""StackedReductionToBinary: the importer's `sum(stack(broadcast_to(...)))` for ONNX Sum becomes binary adds."""

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper
from tvm import relax

from tests.conftest import assert_close, ort_outputs, random_inputs
from tvm_fuse import provenance
from tvm_fuse.frontend.importer import import_onnx
from tvm_fuse.transform.stacked_reduction_to_binary import StackedReductionToBinary

from .relax_modules import assert_every_binding_tagged, module, run


def _stacked_sum(bb, terms, shape, stack_axis=0, sum_axis=0, keepdims=False):
    """What TVM's importer emits for Sum(terms) of broadcast shape `shape` (node 0)."""
    copies = [bb.emit(relax.op.broadcast_to(t, shape), "n0x") for t in terms]
    stacked = bb.emit(relax.op.stack(copies, axis=stack_axis), "n0x")
    return bb.emit(relax.op.sum(stacked, axis=[sum_axis], keepdims=keepdims), "n0x")


PARAMS = {"x": (2, 3), "y": (1, 3), "z": (3,)}


def test_sum_of_three_becomes_two_adds():
    def expected(bb, x, y, z):
        return bb.emit(relax.op.add(bb.emit(relax.op.add(x, y), "n0x"), z), "n0x")

    after = StackedReductionToBinary()(module(PARAMS, lambda bb, x, y, z: _stacked_sum(bb, [x, y, z], (2, 3))))
    tvm.ir.assert_structural_equal(after, module(PARAMS, expected))
    assert [provenance.node_index(b.var) for b in after["main"].body.blocks[0].bindings[:2]] == [0, 0]


def test_a_constant_term_is_added_as_it_is():
    """FoldConstant has already broadcast a constant term: the add takes it in that shape."""
    ones = relax.const(np.ones((2, 3), "float32"))
    params = {"x": (2, 3), "y": (3,)}

    def before(bb, x, y):
        stacked = bb.emit(relax.op.stack([x, bb.emit(relax.op.broadcast_to(y, (2, 3)), "n0x"), ones], axis=0), "n0x")
        return bb.emit(relax.op.sum(stacked, axis=[0]), "n0x")

    def expected(bb, x, y):
        return bb.emit(relax.op.add(bb.emit(relax.op.add(x, y), "n0x"), ones), "n0x")

    tvm.ir.assert_structural_equal(StackedReductionToBinary()(module(params, before)), module(params, expected))


@pytest.mark.parametrize(
    "build",
    [
        lambda bb, x, y, z: _stacked_sum(bb, [x, y, z], (2, 3), sum_axis=1),
        lambda bb, x, y, z: _stacked_sum(bb, [x, y, z], (2, 3), keepdims=True),
        lambda bb, x, y, z: _stacked_sum(bb, [x, y, z], (2, 3), stack_axis=1, sum_axis=1),
        lambda bb, x, y, z: bb.emit(relax.op.sum(x, axis=[0]), "n0x"),
    ],
    ids=["other_axis", "keepdims", "stacked_elsewhere", "plain_sum"],
)
def test_other_sums_are_left_alone(build):
    before = module(PARAMS, build)
    tvm.ir.assert_structural_equal(StackedReductionToBinary()(before), before)


def test_switched_off_by_name():
    before = module(PARAMS, lambda bb, x, y, z: _stacked_sum(bb, [x, y, z], (2, 3)))
    with tvm.transform.PassContext(disabled_pass=["tvm_fuse.StackedReductionToBinary"]):
        tvm.ir.assert_structural_equal(tvm.transform.Sequential([StackedReductionToBinary()])(before), before)


def _sum_model(shapes: dict, op: str = "Sum"):
    graph = helper.make_graph(
        [helper.make_node(op, list(shapes), ["s"]), helper.make_node("Relu", ["s"], ["out"])],
        "g",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in shapes.items()],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _ops(mod: tvm.IRModule) -> list[str]:
    return [b.value.op.name for b in mod["main"].body.blocks[0].bindings if isinstance(b.value, relax.Call)]


def test_tvm_still_imports_sum_as_a_stacked_reduction():
    """If this fails, TVM's Sum converter changed: check whether StackedReductionToBinary is still needed."""
    imported = _ops(import_onnx(_sum_model(PARAMS)))
    assert imported == ["relax.broadcast_to"] * 3 + ["relax.stack", "relax.sum", "relax.nn.relu"]


@pytest.mark.parametrize("batch", [2, "batch"])
def test_matches_onnx_runtime(batch):
    model = _sum_model({"x": [batch, 3], "y": [1, 3], "z": [3]})
    before = relax.transform.FoldConstant()(import_onnx(model))
    after = StackedReductionToBinary()(before)
    assert _ops(after) == ["relax.add", "relax.add", "relax.nn.relu"]
    assert_every_binding_tagged(after)

    feed = random_inputs({"x": (2, 3), "y": (1, 3), "z": (3,)})
    reference = ort_outputs(model, feed)
    for mod in (before, after):
        assert_close(run(mod, feed), reference)


@pytest.mark.parametrize("op, binary", [("Max", "relax.maximum"), ("Min", "relax.minimum"), ("Mean", "relax.add")])
def test_max_min_and_mean_become_binary_ops(op, binary):
    model = _sum_model({"x": [2, 3], "y": [1, 3], "z": [3]}, op)
    after = StackedReductionToBinary()(relax.transform.FoldConstant()(import_onnx(model)))
    assert _ops(after) == [binary, binary] + (["relax.divide"] if op == "Mean" else []) + ["relax.nn.relu"]
    feed = random_inputs({"x": (2, 3), "y": (1, 3), "z": (3,)})
    assert_close(run(after, feed), ort_outputs(model, feed))
