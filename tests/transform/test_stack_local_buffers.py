"""StackLocalBuffers: small `local` buffers (register tiles) live on the stack, not in a
workspace allocated per parallel task; large ones and `global` ones are left to TVM."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm.script import tirx as T

import tvm_fuse
from tests.conftest import AVX512_TARGET, assert_close, ort_outputs, random_inputs
from tvm_fuse import CalibrationTable, QuantConfig
from tvm_fuse.calibration_table import TensorScale
from tvm_fuse.transform.stack_local_buffers import StackLocalBuffers

WORKSPACE_CALL = "TVMBackendAllocWorkspace"


def _pointwise_conv():
    """A 1x1 conv + ReLU: one kernel whose only scratch memory is its register tile."""
    weight = np.random.default_rng(0).standard_normal((64, 32, 1, 1)).astype(np.float32) * 0.2
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Relu", ["c"], ["y"], name="relu")],
        "pointwise", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 14, 14])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 14, 14])], [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_only_small_local_buffers_are_marked():
    @T.prim_func
    def kernel(a: T.Buffer((4096,), "float32")):
        tile = T.alloc_buffer((16,), "float32", scope="local")
        large = T.alloc_buffer((4096,), "float32", scope="local")
        shared = T.alloc_buffer((16,), "float32")
        for i in range(16):
            tile[i] = a[i]
            shared[i] = tile[i]
        for i in range(4096):
            large[i] = a[i]
            a[i] = large[i] + shared[i % 16]

    text = StackLocalBuffers()(tvm.IRModule({"main": kernel})).script()
    marked = [line.split("=")[0].strip() for line in text.splitlines() if "disable_lower_builtin" in line]
    assert marked == ["tile"]


@pytest.mark.parametrize("int8", [False, True])
def test_conv_kernels_allocate_no_workspace(int8):
    quantize = QuantConfig(calibration=CalibrationTable({"x": TensorScale(0.03, 128)}, "minmax")) if int8 else None
    target = "llvm -mcpu=cascadelake" if int8 else AVX512_TARGET
    model = tvm_fuse.build(_pointwise_conv(), target, quantize=quantize)
    assert model.fusion_report()["kernels"][0]["int8"] == int8
    assert WORKSPACE_CALL not in model.assembly()


@pytest.mark.avx512
def test_conv_with_its_tile_on_the_stack_matches_onnx_runtime():
    feed = random_inputs({"x": (1, 32, 14, 14)})
    assert_close(tvm_fuse.build(_pointwise_conv(), AVX512_TARGET).run(None, feed), ort_outputs(_pointwise_conv(), feed))
