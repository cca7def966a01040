"""BlockedResize: an upsampling inside a blocked chain (a DB-Net feature pyramid: conv, Resize,
Add of the next level's conv) runs in the blocks, with no layout change around it, and matches
ONNX Runtime for each resize mode."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_fuse
from tests.conftest import AVX512_TARGET, assert_close, ort_outputs
from tvm_fuse.frontend import relax_module
from tvm_fuse.pipeline import optimize
from tvm_fuse.target import parse_target


def _pyramid(mode: str, transform: str, channels: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def conv(name, x):
        weight = numpy_helper.from_array((rng.standard_normal((channels, 16, 3, 3)) / 12).astype(np.float32), f"{name}_w")
        return [weight], helper.make_node("Conv", [x, f"{name}_w"], [name], kernel_shape=[3, 3], pads=[1, 1, 1, 1])

    (w1,), coarse = conv("coarse", "small")
    (w2,), fine = conv("fine", "large")
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    resize = helper.make_node("Resize", ["coarse", "", "scales"], ["up"], mode=mode,
                              coordinate_transformation_mode=transform)
    add = helper.make_node("Add", ["up", "fine"], ["sum"])
    relu = helper.make_node("Relu", ["sum"], ["y"])
    graph = helper.make_graph(
        [coarse, fine, resize, add, relu], "pyramid",
        [helper.make_tensor_value_info("small", TensorProto.FLOAT, [1, 16, 8, 10]),
         helper.make_tensor_value_info("large", TensorProto.FLOAT, [1, 16, 16, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 16, 20])], [w1, w2, scales])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _layout_transforms(model) -> int:
    mod = optimize(relax_module(model).mod, parse_target(AVX512_TARGET), ())
    return sum(isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)
               and b.value.op.name == "relax.layout_transform"
               for block in mod["main"].body.blocks for b in block.bindings)


@pytest.mark.parametrize("mode, transform", [("nearest", "asymmetric"), ("linear", "half_pixel"),
                                             ("linear", "align_corners")])
def test_an_upsampling_between_blocked_convs_stays_blocked_and_matches_onnx_runtime(mode, transform):
    model = _pyramid(mode, transform, 32)
    # Both inputs into the blocks and the output out of them: none around the resize.
    assert _layout_transforms(model) == 3
    feed = {name: np.random.default_rng(1).standard_normal(shape).astype(np.float32)
            for name, shape in (("small", (1, 16, 8, 10)), ("large", (1, 16, 16, 20)))}
    assert_close(tvm_fuse.build(model, target=AVX512_TARGET).run(None, feed), ort_outputs(model, feed))
