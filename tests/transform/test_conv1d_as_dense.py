"""Conv1dAsDense: a 1-D conv with an output row shorter than a vector and enough work, or a
strided or grouped one over enough channels, runs as a dense layer over its input windows (one
per group), and one whose single output reads its whole input as a dense layer on the input,
with ONNX Runtime's results; others stay convs."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_fuse
from tests.conftest import assert_close, ort_outputs


def _conv1d(batch, channels, width, outputs, taps, stride=1, pads=(0, 0), dilation=1, groups=1):
    """x[batch, channels, width] -> Conv1d with a bias -> Relu."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal((outputs, channels // groups, taps))
                                        / np.sqrt(channels // groups * taps)).astype(np.float32), "w"),
               numpy_helper.from_array(rng.standard_normal(outputs).astype(np.float32), "b")]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[taps], strides=[stride],
                          pads=list(pads), dilations=[dilation], group=groups),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, channels, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, outputs, None])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("shape, pattern", [
    ((8, 1, 640, 258, 256, 128), "dense"),  # Silero's STFT on 8 chunks: 4 outputs per row
    ((8, 129, 4, 128, 3, 1, (1, 1)), "dense"),  # its first encoder conv, padded
    ((16, 128, 12, 128, 3, 2, (2, 2), 2), "dense"),  # strided and dilated: 6 outputs per row
    ((1, 1, 640, 258, 256, 128), "conv1d"),  # one chunk: too little work to pay for two more kernels
    ((32, 64, 1, 128, 3, 1, (1, 1)), "dense"),  # Silero VAD v6's last encoder conv: rows of 1 at batch 32
    ((4, 64, 1, 128, 3, 1, (1, 1)), "conv1d"),  # the same at batch 4: too little work
    ((1, 16, 64, 32, 3, 1, (1, 1)), "conv1d"),  # a row of 64 outputs vectorizes as it is
    ((1, 64, 199, 64, 3, 2), "dense"),  # wav2vec2's feature convs: stride 2, 64 x 3 taps per output
    ((1, 1, 400, 64, 10, 5), "conv1d"),  # its first: 10 taps per output, too short a product
    ((1, 128, 49, 128, 32, 1, (16, 16), 1, 4), "batch_matmul"),  # its positional conv: 4 groups of 32 x 32 taps
    ((1, 64, 100, 64, 3, 1, (1, 1), 1, 4), "group_conv1d"),  # 4 groups of 16 channels x 3 taps: too short
    ((2, 256, 1, 64, 1), "dense"),  # a squeeze-excitation block's 1x1 over a pooled vector (trueocr's)
    ((1, 16, 5, 32, 5), "dense"),  # one output over the whole input: a dense layer on it as it is
])
def test_convs_that_run_as_products_equal_onnx_runtime(shape, pattern):
    model = _conv1d(*shape)
    compiled = tvm_fuse.build(model, "native")
    x = np.random.default_rng(1).standard_normal(shape[:3]).astype(np.float32)
    assert_close(compiled.run(None, {"x": x}), ort_outputs(model, {"x": x}), rtol=1e-4)
    kernel = next(k for k in compiled.fusion_report()["kernels"] if "conv" in k["onnx_nodes"])
    assert kernel["pattern"].startswith(pattern)
