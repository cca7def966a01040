import pytest
from onnx import TensorProto, helper

import tvm_fuse
from tests.conftest import tiny_model
from tvm_fuse import UnsupportedOpsError
from tvm_fuse.frontend.support import unsupported_nodes


def _model_with(nodes):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    )
    model.ir_version = 9
    return model


def test_supported_model_has_no_unsupported_nodes():
    assert unsupported_nodes(tiny_model()) == []


def test_every_unsupported_node_is_reported_at_once():
    model = _model_with(
        [
            helper.make_node("Relu", ["x"], ["a"], name="fine"),
            helper.make_node("FancyOp", ["a"], ["b"], name="custom_1", domain="com.example"),
            helper.make_node("Relu", ["b"], ["c"], name="fine_too"),
            helper.make_node("FancyOp", ["c"], ["d"], name="custom_2", domain="com.example"),
        ]
    )
    with pytest.raises(UnsupportedOpsError) as caught:
        tvm_fuse.build(model, "llvm -mcpu=skylake-avx512")
    names = [n.node_name for n in caught.value.nodes]
    assert names == ["custom_1", "custom_2"]
    message = str(caught.value)
    assert "FancyOp (node 'custom_1', domain com.example, opset 1)" in message
    assert "custom_2" in message


def test_only_the_onnx_runtime_ops_we_convert_pass_in_its_domain():
    """com.microsoft.DynamicQuantizeLSTM is converted; a standard op's name in that domain (a
    contrib op of other semantics) is not taken for the standard op."""
    nodes = [helper.make_node("DynamicQuantizeLSTM", ["x"], ["a"], name="lstm", domain="com.microsoft"),
             helper.make_node("Gelu", ["a"], ["b"], name="gelu", domain="com.microsoft"),
             helper.make_node("Relu", ["b"], ["c"], name="relu", domain="com.microsoft")]
    assert [(n.op_type, n.node_name) for n in unsupported_nodes(_model_with(nodes))] == [("Gelu", "gelu"),
                                                                                          ("Relu", "relu")]


@pytest.mark.parametrize("fusion", [None, "all"])
def test_an_op_of_shapes_unknown_at_build_time_is_refused_naming_its_node(fusion):
    """[n] + [1, 2] is [1, 2] for n of 1 or 2 and an error otherwise; Relax cannot type it, TVM
    does not legalize it, and the node is refused by name rather than failing in VM codegen."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["y"], name="broadcast_add")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor("c", TensorProto.FLOAT, [1, 2], [1.0, 2.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    with pytest.raises(UnsupportedOpsError, match="shape unknown at build time") as caught:
        tvm_fuse.build(model, "llvm -mcpu=skylake-avx512", disable_fusion=fusion)
    assert [(n.op_type, n.node_name) for n in caught.value.nodes] == [("Add", "broadcast_add")]


@pytest.mark.parametrize("op, weight, shape", [
    # The scale of a symbolic channel axis that the weights fix: TVM types the product [?, ?, ?]
    # and its constant folding fails on it.
    ("InstanceNormalization", [2], ["n", "c", 3]),
    # A slope over a symbolic last axis: the multiply it becomes has a result TVM cannot type.
    ("PRelu", [1, 1, 2], ["n", "a", 1, "b"]),
])
def test_an_op_whose_lowering_fails_on_unknown_shapes_is_refused_naming_its_node(op, weight, shape):
    inputs = ["x", "w", "b"] if op == "InstanceNormalization" else ["x", "w"]
    weights = [helper.make_tensor(name, TensorProto.FLOAT, weight, [0.5] * 2) for name in inputs[1:]]
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"], name="the_node")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    with pytest.raises(UnsupportedOpsError, match="shape unknown at build time") as caught:
        tvm_fuse.build(model, "llvm -mcpu=skylake-avx512")
    assert [(n.op_type, n.node_name) for n in caught.value.nodes] == [(op, "the_node")]
