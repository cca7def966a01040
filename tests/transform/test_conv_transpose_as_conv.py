"""ConvTransposeAsConv: a transposed conv (1-D or 2-D) becomes a conv of its stride's phases and a
depth-to-space (a 1x1 conv where kernel == stride), with ONNX Runtime's results, whatever its
kernel, stride, padding and output padding; a dilated one is left alone."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_fuse
from tests.conftest import AVX512_TARGET, assert_close, ort_outputs
from tvm_fuse.frontend import relax_module
from tvm_fuse.transform.conv_transpose_as_conv import ConvTransposeAsConv


def _upsample(kernel: int, stride: int, pads=(0, 0, 0, 0), output_padding=(0, 0), dilation: int = 1):
    """x[1, 16, 10, 12] -> ConvTranspose(16 -> 8, kernel, stride) with a bias -> Relu."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((16, 8, kernel, kernel)).astype(np.float32) * 0.2, "w"),
               numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")]
    graph = helper.make_graph(
        [helper.make_node("ConvTranspose", ["x", "w", "b"], ["up"], name="up", kernel_shape=[kernel, kernel],
                          strides=[stride, stride], pads=list(pads), output_padding=list(output_padding),
                          dilations=[dilation, dilation]),
         helper.make_node("Relu", ["up"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 10, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, None, None])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _transposed_convs(model) -> int:
    mod = ConvTransposeAsConv()(relax.transform.FoldConstant()(relax_module(model).mod))
    return sum(1 for b in mod["main"].body.blocks[0].bindings
               if isinstance(b.value, relax.Call) and getattr(b.value.op, "name", "") == "relax.nn.conv2d_transpose")


@pytest.mark.avx512
@pytest.mark.parametrize("kernel, stride, pads, output_padding, dilation, rewritten", [
    (2, 2, (0, 0, 0, 0), (0, 0), 1, True),  # PP-OCR det's upsampling head: a 1x1 conv
    (4, 4, (0, 0, 0, 0), (0, 0), 1, True),
    (4, 2, (1, 1, 1, 1), (0, 0), 1, True),  # a U-Net's, a GAN's: phases of 2x2 taps
    (3, 2, (1, 1, 1, 1), (1, 1), 1, True),  # kernel not a multiple of the stride
    (3, 2, (0, 1, 2, 0), (1, 0), 1, True),  # padding and output padding on one side
    (5, 3, (2, 2, 2, 2), (2, 2), 1, True),
    (2, 1, (0, 0, 0, 0), (0, 0), 1, True),  # stride 1: a conv with the kernel flipped
    (3, 2, (1, 1, 1, 1), (0, 0), 2, False),  # dilated: TVM's kernel
])
def test_matches_onnxruntime(kernel, stride, pads, output_padding, dilation, rewritten):
    model = _upsample(kernel, stride, pads, output_padding, dilation)
    assert _transposed_convs(model) == (0 if rewritten else 1)
    x = {"x": np.random.default_rng(1).standard_normal((1, 16, 10, 12)).astype(np.float32)}
    assert_close(tvm_fuse.build(model, AVX512_TARGET).run(None, x), ort_outputs(model, x))


def _upsample_1d(kernel: int, stride: int, pads=(0, 0), output_padding=(0,)):
    """x[1, 12, 30] -> ConvTranspose1d(12 -> 10, kernel, stride) with a bias (an EEG decoder's)."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((12, 10, kernel)).astype(np.float32) * 0.2, "w"),
               numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "b")]
    graph = helper.make_graph(
        [helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], name="up", kernel_shape=[kernel],
                          strides=[stride], pads=list(pads), output_padding=list(output_padding))], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12, 30])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10, None])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.avx512
@pytest.mark.parametrize("kernel, stride, pads, output_padding", [
    (5, 5, (0, 0), (0,)),  # kernel == stride: a 1-wide conv and a depth-to-space
    (4, 2, (1, 1), (0,)),
    (3, 2, (0, 2), (1,)),
    (2, 1, (0, 0), (0,)),
])
def test_1d_matches_onnxruntime(kernel, stride, pads, output_padding):
    model = _upsample_1d(kernel, stride, pads, output_padding)
    mod = ConvTransposeAsConv()(relax.transform.FoldConstant()(relax_module(model).mod))
    assert not any(getattr(b.value.op, "name", "") == "relax.nn.conv1d_transpose"
                   for b in mod["main"].body.blocks[0].bindings if isinstance(b.value, relax.Call))
    x = {"x": np.random.default_rng(1).standard_normal((1, 12, 30)).astype(np.float32)}
    assert_close(tvm_fuse.build(model, AVX512_TARGET).run(None, x), ort_outputs(model, x))
