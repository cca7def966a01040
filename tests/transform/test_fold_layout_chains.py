"""FoldLayoutChains: the transposes and reshapes that carry tokens into a blocked conv and back
(SegFormer's Mix-FFN, ConvNeXt) are moved by the layout transforms at the chain's borders, with
no kernels of their own; a move whose input something else reads stays; all equal ONNX Runtime."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import assert_close, ort_outputs

MOVED = "no kernel of its own: moved by a layout transform at a blocked chain's border"


def _model(nodes, x_shape, outputs: dict, constants: dict):
    """A graph of `nodes` from x of `x_shape` to `outputs` {name: shape}; a depthwise 3x3 conv's
    weight `w` (32 channels) and `constants` (int64 shapes) as initializers."""
    weight = np.random.default_rng(0).standard_normal((32, 1, 3, 3)).astype(np.float32)
    initializers = [numpy_helper.from_array(weight, "w")]
    initializers += [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in constants.items()]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outputs.items()],
                              initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _conv(source: str, output: str):
    return helper.make_node("Conv", [source, "w"], [output], name="dwconv", group=32, kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1])


def _tokens_through_conv(shared: bool):
    """x [1, 64 tokens, 32] -> image [1, 32, 8, 8] -> depthwise conv -> tokens [1, 64, 32];
    `shared`: the transposed tokens are an output too."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="to_channels", perm=[0, 2, 1]),
             helper.make_node("Reshape", ["t", "image"], ["i"], name="to_image"), _conv("i", "c"),
             helper.make_node("Reshape", ["c", "flat"], ["f"], name="to_tokens"),
             helper.make_node("Transpose", ["f"], ["y"], name="to_rows", perm=[0, 2, 1])]
    outputs = {"y": [1, 64, 32], **({"t": [1, 32, 64]} if shared else {})}
    return _model(nodes, [1, 64, 32], outputs, {"image": [1, 32, 8, 8], "flat": [1, 32, 64]})


def _build(model, x_shape):
    compiled = tvm_fuse.build(model, "native")
    x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)
    assert_close(compiled.run(None, {"x": x}), ort_outputs(model, {"x": x}))
    return compiled.fusion_report()


def test_tokens_into_a_blocked_conv_and_back_take_one_copy_each_way():
    report = _build(_tokens_through_conv(shared=False), (1, 64, 32))
    assert [k["name"] for k in report["kernels"]] == ["depthwise_conv2d"]
    assert report["layout_transforms"] == 2 and report["unfused"] == []
    moved = {f["onnx_node"] for f in report["folded"] if f["reason"] == MOVED}
    assert moved == {"to_channels", "to_image", "to_tokens", "to_rows"}


def test_a_move_something_else_reads_runs_on_its_own():
    report = _build(_tokens_through_conv(shared=True), (1, 64, 32))
    assert "to_channels" in {u["onnx_node"] for u in report["unfused"]}
    moved = {f["onnx_node"] for f in report["folded"] if f["reason"] == MOVED}
    assert moved == {"to_image", "to_tokens", "to_rows"}


@pytest.mark.parametrize("shape, perm", [
    ([1, 8, 8, 32], [0, 2, 3, 1]),  # ConvNeXt: the conv's output channels-last
    ([8, 8, 32, 1], [2, 3, 1, 0]),  # every axis moved
])
def test_a_blocked_conv_output_permuted(shape, perm):
    nodes = [_conv("x", "c"), helper.make_node("Transpose", ["c"], ["y"], name="channels_last", perm=perm)]
    report = _build(_model(nodes, [1, 32, 8, 8], {"y": shape}, {}), (1, 32, 8, 8))
    assert report["layout_transforms"] == 2 and report["unfused"] == []


def test_a_reshape_across_channel_blocks_is_still_exact():
    """[1, 32, 8, 8] read as [1, 8, 32, 8] after the conv splits its 16-channel blocks."""
    nodes = [_conv("x", "c"), helper.make_node("Reshape", ["c", "mixed"], ["y"], name="mix")]
    _build(_model(nodes, [1, 32, 8, 8], {"y": [1, 8, 32, 8]}, {"mixed": [1, 8, 32, 8]}), (1, 32, 8, 8))
