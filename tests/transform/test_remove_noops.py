"""RemoveNoOps: bindings that return their input are dropped; an output variable stays, bound to it."""

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from tests.conftest import assert_close, ort_outputs, random_inputs
from tvm_fuse import provenance
from tvm_fuse.frontend.importer import import_onnx
from tvm_fuse.transform.remove_noops import RemoveNoOps

from .relax_modules import run

ONES = relax.const(np.ones((2, 3), "float32"))
ZEROS = relax.const(np.zeros(3, "float32"))


def _module(build, shape=(2, 3)) -> tvm.IRModule:
    """`main(x)` returning what `build(bb, x)` emits, as the importer lays it out."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            output = bb.emit_output(build(bb, x))
        bb.emit_func_output(output)
    return bb.get()


NOOPS = {  # name -> the no-op on a (2, 3) float32 tensor
    "reshape": lambda bb, h: bb.emit(relax.op.reshape(h, (2, 3)), "n1x"),
    "broadcast_to": lambda bb, h: bb.emit(relax.op.broadcast_to(h, (2, 3)), "n1x"),
    "astype": lambda bb, h: bb.emit(relax.op.astype(h, "float32"), "n1x"),
    "expand_dims_squeeze": lambda bb, h: bb.emit(relax.op.squeeze(bb.emit(relax.op.expand_dims(h, 0), "n1x")), "n2x"),
    "reshape_chain": lambda bb, h: bb.emit(relax.op.reshape(bb.emit(relax.op.reshape(h, (6,)), "n1x"), (2, 3)), "n2x"),
    "times_ones": lambda bb, h: bb.emit(relax.op.multiply(h, ONES), "n1x"),
    "ones_times": lambda bb, h: bb.emit(relax.op.multiply(ONES, h), "n1x"),
    "plus_zeros": lambda bb, h: bb.emit(relax.op.add(h, ZEROS), "n1x"),
    "zeros_plus": lambda bb, h: bb.emit(relax.op.add(ZEROS, h), "n1x"),
    "minus_zeros": lambda bb, h: bb.emit(relax.op.subtract(h, ZEROS), "n1x"),
    "over_ones": lambda bb, h: bb.emit(relax.op.divide(h, ONES), "n1x"),
}


@pytest.mark.parametrize("noop", NOOPS)
def test_noops_are_removed(noop):
    def before(bb, x):
        h = bb.emit(relax.op.nn.relu(x), "n0x")
        return bb.emit(relax.op.exp(NOOPS[noop](bb, h)), "n3x")

    def expected(bb, x):
        return bb.emit(relax.op.exp(bb.emit(relax.op.nn.relu(x), "n0x")), "n3x")

    tvm.ir.assert_structural_equal(RemoveNoOps()(_module(before)), _module(expected))


@pytest.mark.parametrize("noop", ["reshape", "expand_dims_squeeze"])
def test_an_output_noop_leaves_the_output_bound_to_its_input(noop):
    def before(bb, x):
        return NOOPS[noop](bb, bb.emit(relax.op.nn.relu(x), "n0x"))

    after = RemoveNoOps()(_module(before))
    tvm.ir.assert_structural_equal(after, _module(lambda bb, x: bb.emit(relax.op.nn.relu(x), "n0x")))
    main = after["main"]
    output = main.body.blocks[0].bindings[-1]
    assert output.var.same_as(main.body.body) and output.var.name == "gv"
    assert output.value.name == "n0x"


def test_a_noop_bound_to_the_output_itself_becomes_an_alias():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.relu(x), "n0x")
            output = bb.emit_output(relax.op.reshape(h, (2, 3)), "n1x")
        bb.emit_func_output(output)
    main = RemoveNoOps()(bb.get())["main"]
    last = main.body.blocks[0].bindings[-1]
    assert last.var.same_as(main.body.body) and last.var.name == "n1x" and last.value.name == "n0x"


@pytest.mark.parametrize(
    "build",
    [
        lambda bb, h: bb.emit(relax.op.reshape(h, (3, 2)), "n1x"),
        lambda bb, h: bb.emit(relax.op.broadcast_to(h, (4, 2, 3)), "n1x"),
        lambda bb, h: bb.emit(relax.op.astype(h, "float16"), "n1x"),
        lambda bb, h: bb.emit(relax.op.reshape(bb.emit(relax.op.permute_dims(h), "n1x"), (2, 3)), "n2x"),
        lambda bb, h: bb.emit(relax.op.multiply(h, relax.const(np.full((2, 3), 2.0, "float32"))), "n1x"),
        lambda bb, h: bb.emit(relax.op.multiply(h, relax.const(np.ones((4, 2, 3), "float32"))), "n1x"),
        lambda bb, h: bb.emit(relax.op.add(h, relax.const(np.ones(3, "float32"))), "n1x"),
        lambda bb, h: bb.emit(relax.op.subtract(ZEROS, h), "n1x"),
        lambda bb, h: bb.emit(relax.op.divide(ONES, h), "n1x"),
        lambda bb, h: bb.emit(relax.op.multiply(h, h), "n1x"),
    ],
    ids=["other_shape", "larger", "other_dtype", "through_transpose", "times_two", "broadcasting_ones",
         "plus_ones", "zeros_minus", "ones_over", "not_constant"],
)
def test_ops_that_change_something_are_kept(build):
    before = _module(lambda bb, x: build(bb, bb.emit(relax.op.nn.relu(x), "n0x")))
    tvm.ir.assert_structural_equal(RemoveNoOps()(before), before)


def test_switched_off_by_name():
    before = _module(lambda bb, x: NOOPS["reshape"](bb, x))
    with tvm.transform.PassContext(disabled_pass=["tvm_fuse.RemoveNoOps"]):
        tvm.ir.assert_structural_equal(tvm.transform.Sequential([RemoveNoOps()])(before), before)


def test_matches_onnx_runtime():
    """Exporter leftovers around a Relu, the last of them the graph's output."""
    constants = {
        "shape": np.array([2, 3], np.int64), "axes": np.array([0], np.int64),
        "ones": np.ones((1, 3), np.float32), "zeros": np.zeros(3, np.float32),
    }
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["x", "shape"], ["r"]),
            helper.make_node("Cast", ["r"], ["c"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["c", "axes"], ["u"]),
            helper.make_node("Squeeze", ["u", "axes"], ["s"]),
            helper.make_node("Mul", ["s", "ones"], ["m"]),
            helper.make_node("Relu", ["m"], ["h"]),
            helper.make_node("Expand", ["h", "shape"], ["e"]),
            helper.make_node("Add", ["e", "zeros"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(value, name) for name, value in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    before = relax.transform.FoldConstant()(import_onnx(model))
    after = RemoveNoOps()(before)

    main = after["main"]
    relu, output = main.body.blocks[0].bindings
    assert relu.value.op.name == "relax.nn.relu" and relu.value.args[0].same_as(main.params[0])
    assert provenance.node_index(relu.var) == 5 and output.value.same_as(relu.var)

    feed = random_inputs({"x": (2, 3)})
    reference = ort_outputs(model, feed)
    for mod in (before, after):
        assert_close(run(mod, feed), reference)
