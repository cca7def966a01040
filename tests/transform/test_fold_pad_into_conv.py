"""FoldPadIntoConv and the Pad converter: a zero Pad of a conv's spatial axes becomes the conv's
own padding (no pad kernel, the conv chain stays blocked), a Pad of nothing is dropped, and a
Pad of another value stays a kernel; all equal ONNX Runtime."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import assert_close, ort_outputs


def _pad_conv(pads, value=0.0, opset=17):
    """x [1, 16, 8, 8] -> Pad(pads, value) -> Conv 3x3 (16 -> 16) -> Relu."""
    rng = np.random.default_rng(0)
    initializers = [numpy_helper.from_array(rng.standard_normal((16, 16, 3, 3)).astype(np.float32) / 12, "w")]
    if opset >= 11:
        initializers += [numpy_helper.from_array(np.array(pads, np.int64), "pads"),
                         numpy_helper.from_array(np.array(value, np.float32), "value")]
        pad = helper.make_node("Pad", ["x", "pads", "value"], ["p"], name="pad", mode="constant")
    else:
        pad = helper.make_node("Pad", ["x"], ["p"], name="pad", mode="constant", pads=list(pads), value=value)
    height, width = 8 + pads[2] + pads[6] - 2, 8 + pads[3] + pads[7] - 2
    graph = helper.make_graph(
        [pad, helper.make_node("Conv", ["p", "w"], ["c"], name="conv", kernel_shape=[3, 3]),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, height, width])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("pads, value, opset, folded", [
    ((0, 0, 1, 1, 0, 0, 1, 1), 0.0, 17, True),  # "same" padding written as a Pad
    ((0, 0, 0, 0, 0, 0, 1, 1), 0.0, 17, True),  # nn.ZeroPad2d((0, 1, 0, 1)) before a strided conv
    ((0, 0, 2, 1, 0, 0, 1, 2), 0.0, 10, True),  # Pad-2's attributes (opsets 2-10)
    ((0, 0, 0, 0, 0, 0, 0, 0), 0.0, 17, True),  # nothing padded
    ((0, 0, 1, 1, 0, 0, 1, 1), 1.0, 17, False),  # another value than the conv's zeros
    ((1, 0, 1, 1, 0, 0, 1, 1), 0.0, 17, False),  # the batch axis padded too
])
def test_a_zero_pad_is_the_convs_own_padding(pads, value, opset, folded):
    model = _pad_conv(pads, value, opset)
    compiled = tvm_fuse.build(model, "native")
    x = np.random.default_rng(1).standard_normal((1, 16, 8, 8)).astype(np.float32)
    assert_close(compiled.run(None, {"x": x}), ort_outputs(model, {"x": x}))
    report = compiled.fusion_report()
    assert len(report["kernels"]) == 1
    assert ({u["onnx_node"] for u in report["unfused"]} == {"pad"}) != folded
