"""Conv3dAsConv2d: a 3-D conv whose kernel is one frame deep becomes a 2-D conv of each frame
(one frame: squeezed; several: moved into the batch), with ONNX Runtime's results; a kernel
deeper than a frame, or padding or a stride along depth, is left to TVM's conv3d."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_fuse
from tests.conftest import AVX512_TARGET, assert_close, ort_outputs
from tvm_fuse.frontend import relax_module
from tvm_fuse.transform.conv3d_as_conv2d import Conv3dAsConv2d


def _conv3d(depth: int, kernel=(1, 3, 3), pads=(0, 1, 1, 0, 1, 1), strides=(1, 1, 1), group: int = 1):
    """x[2, 4, depth, 10, 12] -> Conv 3-D (4 -> 6) with a bias -> Tanh."""
    rng = np.random.default_rng(depth)
    weights = [numpy_helper.from_array(rng.standard_normal((6, 4 // group, *kernel)).astype(np.float32) * 0.2, "w"),
               numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b")]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=list(kernel), pads=list(pads),
                          strides=list(strides), group=group),
         helper.make_node("Tanh", ["c"], ["y"], name="tanh")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, depth, 10, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _conv3ds(model) -> int:
    mod = Conv3dAsConv2d()(relax_module(model).mod)
    return sum(1 for b in mod["main"].body.blocks[0].bindings
               if isinstance(b.value, relax.Call) and getattr(b.value.op, "name", "") == "relax.nn.conv3d")


@pytest.mark.avx512
@pytest.mark.parametrize("depth, kernel, pads, strides, group, rewritten", [
    (1, (1, 3, 3), (0, 1, 1, 0, 1, 1), (1, 1, 1), 1, True),  # RivaGAN's form: one frame
    (3, (1, 3, 3), (0, 1, 1, 0, 1, 1), (1, 2, 2), 2, True),  # frames into the batch, strided, grouped
    (3, (3, 3, 3), (1, 1, 1, 1, 1, 1), (1, 1, 1), 1, False),  # a kernel three frames deep
    (3, (1, 3, 3), (1, 1, 1, 1, 1, 1), (1, 1, 1), 1, False),  # padding along depth
], ids=str)
def test_a_conv3d_one_frame_deep_is_a_conv2d_and_matches_onnxruntime(depth, kernel, pads, strides, group, rewritten):
    model = _conv3d(depth, kernel, pads, strides, group)
    assert (_conv3ds(model) == 0) == rewritten
    feed = {"x": np.random.default_rng(1).standard_normal((2, 4, depth, 10, 12)).astype(np.float32)}
    assert_close(tvm_fuse.build(model, AVX512_TARGET).run(None, feed), ort_outputs(model, feed))
