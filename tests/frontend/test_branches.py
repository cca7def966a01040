"""If branches with a condition known only at run time: each is compiled as a graph of its own
(fused like the main graph), the taken one matches ONNX Runtime, and one that cannot be built
for the model's shapes is an error when taken, not at build time."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import assert_close, ort_outputs
from tvm_fuse.frontend.branches import all_nodes, outer_names


def _if_model(then_nodes, else_nodes, x_shape=(1, 8, 6, 6), out_shape=(None,) * 4, initializers=()):
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], name="pick",
                          then_branch=helper.make_graph(then_nodes, "then", [], [out]),
                          else_branch=helper.make_graph(else_nodes, "else", [], [out]))],
        "if_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape)),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))],
        list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _conv_branch(prefix: str, activation: str):
    return [helper.make_node("Conv", ["x", f"{prefix}_w", f"{prefix}_b"], [f"{prefix}_c"], name=f"{prefix}_conv",
                             pads=[1, 1, 1, 1]),
            helper.make_node(activation, [f"{prefix}_c"], ["y"], name=f"{prefix}_act")]


def _weights(rng, prefix, channels=16):
    return [numpy_helper.from_array(rng.normal(0, 0.2, (channels, 8, 3, 3)).astype(np.float32), f"{prefix}_w"),
            numpy_helper.from_array(rng.normal(0, 0.1, channels).astype(np.float32), f"{prefix}_b")]


def test_outer_names_are_what_a_branch_reads_from_outside():
    inner = helper.make_graph([helper.make_node("Add", ["a", "z"], ["b"])], "inner", [],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
    branch = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["a"]),
         helper.make_node("If", ["c"], ["b"], then_branch=inner, else_branch=inner)],
        "branch", [], [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
    assert outer_names(branch) == ["x", "w", "c", "z"]


def test_each_branch_is_fused_and_the_taken_one_matches_onnxruntime():
    rng = np.random.default_rng(0)
    model = _if_model(_conv_branch("t", "Relu"), _conv_branch("e", "Sigmoid"),
                      initializers=_weights(rng, "t") + _weights(rng, "e"))
    compiled = tvm_fuse.build(model, "native")
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    for cond in (True, False):
        feed = {"x": x, "cond": np.array(cond)}
        assert_close(compiled.run(None, feed), ort_outputs(model, feed), rtol=1e-4)
    report = compiled.fusion_report()
    fused = {tuple(k["onnx_nodes"]): k["pattern"] for k in report["kernels"]}
    assert fused[("t_conv", "t_act")].endswith("relu") and fused[("e_conv", "e_act")].endswith("sigmoid")
    assert [u["onnx_node"] for u in report["unfused"]] == ["pick"]
    assert len(all_nodes(model)) == 5


def test_a_branch_that_cannot_be_built_for_the_shapes_fails_when_taken():
    shapes = [numpy_helper.from_array(np.array(s, np.int64), n) for n, s in (("s_then", [2, 4]), ("s_else", [3, 5]))]
    model = _if_model([helper.make_node("Reshape", ["x", "s_then"], ["y"], name="fits")],
                      [helper.make_node("Reshape", ["x", "s_else"], ["y"], name="does_not_fit")],
                      x_shape=(1, 8), out_shape=(None, None), initializers=shapes)
    compiled = tvm_fuse.build(model, "native")
    x = np.arange(8, dtype=np.float32).reshape(1, 8)
    feed = {"x": x, "cond": np.array(True)}
    assert_close(compiled.run(None, feed), ort_outputs(model, feed))
    with pytest.raises(Exception, match="else of If 'pick' cannot run on inputs of the shapes"):
        compiled.run(None, {"x": x, "cond": np.array(False)})
    reasons = {u["onnx_node"]: u["reason"] for u in compiled.fusion_report()["unfused"]}
    assert "node 'does_not_fit'" in reasons["does_not_fit"]
    # Calibration feeds that take it are the user's input at fault, named so.
    with pytest.raises(tvm_fuse.InputError, match="calibration feed 2: .*else of If 'pick' cannot run"):
        tvm_fuse.quantize(model, [feed, {"x": x, "cond": np.array(False)}])
