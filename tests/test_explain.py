"""The fusion report: every ONNX node accounted for, reasons that name the node at fault, and
the same data from `CompiledModel.fusion_report()`, an exported model and `tvm-fuse explain`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tvm_fuse import cli
from tvm_fuse.benchmarking.models import named_model


def _labels(report, key):
    return {entry["onnx_node"] for entry in report[key]}


def _conv_model():
    """conv -> relu, whose output feeds both a second conv and the graph's second output."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) / 8, f"w{i}")
               for i in range(2)]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["y"], name="relu1"),
        helper.make_node("Sigmoid", ["c0"], ["z"], name="gate"),
    ]
    graph = helper.make_graph(
        nodes, "explain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8, 6, 6])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_a_second_consumer_is_named_as_the_reason():
    report = tvm_fuse.build(_conv_model()).fusion_report()
    assert [(k["pattern"], k["onnx_nodes"]) for k in report["kernels"]] == [
        ("conv2d", ["conv0"]), ("conv2d+relu", ["conv1", "relu1"])]
    reasons = {u["onnx_node"]: u["reason"] for u in report["unfused"]}
    assert set(reasons) == {"relu0", "gate"}
    assert "Conv 'conv0'" in reasons["relu0"] and "2 consumers" in reasons["relu0"]


def test_a_disabled_family_is_named_as_the_reason():
    report = tvm_fuse.build(_conv_model(), disable_fusion=["conv_relu"]).fusion_report()
    assert [k["pattern"] for k in report["kernels"]] == ["conv2d", "conv2d"]
    reason = {u["onnx_node"]: u["reason"] for u in report["unfused"]}["relu1"]
    assert "conv_relu" in reason and "TVM_FUSE_DISABLE_FUSE_CONV_RELU" in reason
    assert report["disabled_families"] == ["conv_relu"]


def _plain_convs_model():
    """A blocked conv, a grouped conv (8 groups of 4 channels, not whole blocks) and a
    depthwise conv of 20 channels, which neither an AVX-512 block (16) nor half of one divides
    (an AVX2 block's half, 4, does)."""
    rng = np.random.default_rng(0)
    layers = [("conv", 16, 32, 1), ("grouped", 32, 32, 8), ("narrow", 32, 20, 1), ("depthwise", 20, 20, 20)]
    nodes, weights, x = [], [], "x"
    for name, c_in, c_out, groups in layers:
        weights.append(numpy_helper.from_array(
            rng.standard_normal((c_out, c_in // groups, 3, 3)).astype(np.float32) / 8, f"{name}.w"))
        nodes.append(helper.make_node("Conv", [x, f"{name}.w"], [name], name=name, group=groups, pads=[1] * 4))
        x = name
    graph = helper.make_graph(nodes, "plain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 20, 8, 8])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("target, block, narrow, depthwise", [
    ("llvm -mcpu=skylake-avx512", 16, ("NCHW", "neither 16 nor 8 divides its 20 output channels"),
     ("NCHW", "a depthwise conv of 20 channels, which neither 16 nor 8 divides")),
    ("llvm -mcpu=haswell", 8, ("NCHW8c", None), ("NCHW4c", None)),  # 20 channels take blocks of 4
])
def test_each_conv_kernel_reports_its_layout_and_why_one_stayed_nchw(target, block, narrow, depthwise):
    compiled = tvm_fuse.build(_plain_convs_model(), target)
    kernels = {k["onnx_nodes"][0]: k for k in compiled.fusion_report()["kernels"]}
    assert kernels["conv"]["layout"] == f"NCHW{block}c" and "plain_reason" not in kernels["conv"]
    assert (kernels["narrow"]["layout"], kernels["narrow"].get("plain_reason")) == narrow
    assert kernels["grouped"]["plain_reason"] == (f"a grouped conv (8 groups of 4 input and 4 output channels), "
                                                  f"whose groups are not whole blocks of {block}")
    assert kernels["grouped"]["layout"] == "NCHW"
    assert (kernels["depthwise"]["layout"], kernels["depthwise"].get("plain_reason")) == depthwise
    if depthwise[1]:
        assert f"depthwise (depthwise_conv2d): {depthwise[1]}" in compiled._report.summary()


def test_an_unknown_family_is_refused_with_the_choices():
    with pytest.raises(tvm_fuse.TvmFuseError, match="conv_relu"):
        tvm_fuse.build(_conv_model(), disable_fusion=["conv_rleu"])


def test_every_node_of_resnet18_is_accounted_for_once():
    model = named_model("resnet18")
    report = tvm_fuse.build(model).fusion_report()
    fused = [n for k in report["kernels"] for n in k["onnx_nodes"]]
    unfused, folded = _labels(report, "unfused"), _labels(report, "folded")
    assert len(fused) == len(set(fused))
    assert sorted(fused + sorted(unfused) + sorted(folded)) == sorted(n.name for n in model.graph.node)
    assert {n.name for n in model.graph.node if n.op_type == "Conv"} <= set(fused)
    assert report["layout_transforms"] == 2  # into the blocked layout at the input, out of it before the classifier


def test_the_report_survives_export_and_the_cli_prints_it(tmp_path, capsys):
    model = _conv_model()
    built = tvm_fuse.build(model)
    library = built.export(tmp_path / "m.so")
    assert tvm_fuse.load(library).fusion_report() == built.fusion_report()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    assert cli.main(["explain", str(path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["kernels"] == built.fusion_report()["kernels"]
    assert cli.main(["explain", str(path)]) == 0
    assert "conv2d+relu" in capsys.readouterr().out
